/* Where the files shipped with rbee are found (the bundled models under
 * models/, the CLIP vocabulary): an installed program reads them from the
 * data folder of its own prefix, found relative to the running executable
 * (<prefix>/bin/x -> <prefix>/share/rbee, as `cmake --install` lays them
 * out, so an installed tree works wherever it is copied, DESTDIR included);
 * a program run from its build tree reads them from the source tree it was
 * built from. A program installed into the same prefix as the library
 * finds them the same way. */
#ifndef RBEE_DATA_PATH_H
#define RBEE_DATA_PATH_H

#include "rbee/status.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the path of the shipped file or folder rel ("models/default/x.gguf")
 * into buf: <exe dir>/<bin-to-data path>/rel when the executable's prefix
 * has rbee's data folder, else <source tree>/rel. RB_E_NOT_FOUND (naming
 * where it looked) when rel exists in neither; RB_E_RANGE when a path does
 * not fit in len; RB_E_INVALID for a NULL or absolute rel. */
rb_status rb_data_path(const char *rel, char *buf, size_t len, rb_error *err);

#ifdef __cplusplus
}
#endif

#endif

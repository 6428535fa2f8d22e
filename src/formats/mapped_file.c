/* Read-only whole-file memory mapping (see mapped_file.h). */
#include "formats/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

rb_status rb_mapped_file_open(const char *path, rb_mapped_file *out, rb_error *err) {
    if (!out) return rb_error_set(err, RB_E_INVALID, "mapped_file: out is NULL");
    out->data = NULL;
    out->size = 0;
    if (!path) return rb_error_set(err, RB_E_INVALID, "mapped_file: path is NULL");

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return rb_error_set(err, e == ENOENT ? RB_E_NOT_FOUND : RB_E_IO, "cannot open '%s': %s", path,
                            strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return rb_error_set(err, RB_E_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return rb_error_set(err, RB_E_FORMAT, "'%s' is a directory, not a file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return rb_error_set(err, RB_E_FORMAT, "'%s' is not a regular file", path);
    }
    if (st.st_size <= 0) {
        close(fd);
        return rb_error_set(err, RB_E_FORMAT, "'%s' is empty", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return rb_error_set(err, RB_E_RANGE, "'%s' is too large to map", path);
    }
    size_t size = (size_t)st.st_size;
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (p == MAP_FAILED) return rb_error_set(err, RB_E_IO, "cannot mmap '%s': %s", path, strerror(e));
    out->data = p;
    out->size = size;
    return RB_OK;
}

void rb_mapped_file_close(rb_mapped_file *m) {
    if (!m) return;
    if (m->data) munmap((void *)(uintptr_t)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

# Man pages for rbee and the workers, made by help2man from each program's
# own --help and --version at build time (so they always match the flags),
# with the sections --help cannot hold (files, environment, examples, see
# also) from docs/man/<name>.h2m. Installed to share/man/man1. Without
# help2man (scripts/setup.sh installs it) no pages are made: the build says
# so and the install test reports what is missing.
find_program(RBEE_HELP2MAN help2man)
if(NOT RBEE_HELP2MAN)
  message(STATUS "help2man not found: man pages not built (scripts/setup.sh installs it)")
  return()
endif()
set(_pages "")
# target|page name|one-line summary for NAME
foreach(spec "rbee_cli|rbee|run LLMs and Stable Diffusion from the command line: generate, convert, quantize, benchmark"
    "llm-worker-rbee|llm-worker-rbee|the rbee LLM worker: serves a language model over HTTP (rbee jobs, OpenAI API)"
    "sd-worker-rbee|sd-worker-rbee|the rbee Stable Diffusion worker: serves an image model over HTTP (rbee jobs, A1111 and OpenAI APIs)")
  string(REPLACE "|" ";" spec "${spec}")
  list(GET spec 0 tgt)
  list(GET spec 1 name)
  list(GET spec 2 what)
  if(NOT TARGET ${tgt})
    continue()
  endif()
  set(page ${CMAKE_BINARY_DIR}/man/${name}.1)
  add_custom_command(OUTPUT ${page}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    COMMAND ${RBEE_HELP2MAN} --no-info --section=1
      --name=${what} --include=${CMAKE_SOURCE_DIR}/docs/man/${name}.h2m --output=${page} $<TARGET_FILE:${tgt}>
    DEPENDS ${tgt} ${CMAKE_SOURCE_DIR}/docs/man/${name}.h2m
    COMMENT "help2man: ${name}.1" VERBATIM)
  list(APPEND _pages ${page})
endforeach()
add_custom_target(rbee_man ALL DEPENDS ${_pages})
install(FILES ${_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

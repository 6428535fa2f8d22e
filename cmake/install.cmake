# Install rules (`cmake --install`, `make install PREFIX=... DESTDIR=...`),
# laid out as a Debian C project: the programs and their -cpu/-cuda/-rocm
# names in bin/, the bundled models and the CLIP vocabulary in share/rbee/
# (found at run time relative to the executable, include/rbee/data_path.h),
# the public headers, the library as one static archive librbee.a with
# rbee.pc, the man pages (cmake/manpages.cmake), bash completion for rbee
# and an example systemd unit.

# Programs. The worker names are the symlinks the build makes beside each
# worker (install copies links as links).
install(TARGETS rbee_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(w llm-worker-rbee sd-worker-rbee)
  if(TARGET ${w})
    install(TARGETS ${w} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    foreach(alias cpu cuda rocm)
      install(PROGRAMS $<TARGET_FILE_DIR:${w}>/${w}-${alias} DESTINATION ${CMAKE_INSTALL_BINDIR})
    endforeach()
  endif()
endforeach()

# Shipped data: what the programs load without a path (the default LLM,
# the CLIP vocabulary of single-file SD checkpoints). The training logs and
# references of models/default stay in the source tree; so does its hf/
# folder (the worker serves the GGUF).
set(RBEE_DATA_DEST ${CMAKE_INSTALL_DATADIR}/rbee)
install(FILES models/default/rbee-default-q8_0.gguf models/default/MODEL_CARD.md
  DESTINATION ${RBEE_DATA_DEST}/models/default)
install(FILES models/clip/bpe_simple_vocab_16e6.txt.gz models/clip/LICENSE
  DESTINATION ${RBEE_DATA_DEST}/models/clip)
# The bundled SD model: the repository holds its diffusers folder (what
# diffusers loads); the build converts it to GGUF (f16, the folder's values:
# the same pictures), which is what is installed, as for the default LLM.
set(RBEE_DEFAULT_SD ${CMAKE_SOURCE_DIR}/models/default-sd)
if(TARGET rbee_cli AND EXISTS ${RBEE_DEFAULT_SD}/model_index.json)
  set(RBEE_DEFAULT_SD_GGUF ${CMAKE_BINARY_DIR}/models/default-sd/rbee-default-sd-f16.gguf)
  file(GLOB_RECURSE RBEE_DEFAULT_SD_FILES CONFIGURE_DEPENDS ${RBEE_DEFAULT_SD}/*.json ${RBEE_DEFAULT_SD}/*.safetensors
       ${RBEE_DEFAULT_SD}/*.txt)
  add_custom_command(OUTPUT ${RBEE_DEFAULT_SD_GGUF}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/models/default-sd
    COMMAND rbee_cli convert ${RBEE_DEFAULT_SD} -o ${RBEE_DEFAULT_SD_GGUF} --type f16 --quiet
    DEPENDS rbee_cli ${RBEE_DEFAULT_SD_FILES}
    COMMENT "Converting the bundled default SD model to GGUF")
  add_custom_target(default_sd_gguf ALL DEPENDS ${RBEE_DEFAULT_SD_GGUF})
  install(FILES ${RBEE_DEFAULT_SD_GGUF} ${RBEE_DEFAULT_SD}/MODEL_CARD.md
    DESTINATION ${RBEE_DATA_DEST}/models/default-sd)
endif()

# Public headers.
install(DIRECTORY include/rbee DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

# The library: the layers below the workers (their API is include/rbee)
# merged into librbee.a with ar's MRI script, so users link one archive
# (and -ldl); the GPU backends are the modules in <libdir>/rbee.
set(RBEE_LIB_LAYERS rbee_sd rbee_image rbee_convert rbee_runtime rbee_chat rbee_models rbee_tokenizer
  rbee_formats rbee_backends rbee_cpu rbee_core)
set(_mri "create ${CMAKE_BINARY_DIR}/librbee.a\n")
set(_deps "")
foreach(l ${RBEE_LIB_LAYERS})
  if(TARGET ${l})
    string(APPEND _mri "addlib $<TARGET_FILE:${l}>\n")
    list(APPEND _deps ${l})
  endif()
endforeach()
string(APPEND _mri "save\nend\n")
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/librbee.mri CONTENT "${_mri}")
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/librbee.a
  COMMAND ${CMAKE_COMMAND} -E rm -f ${CMAKE_BINARY_DIR}/librbee.a
  COMMAND ${CMAKE_COMMAND} -DAR=${CMAKE_AR} -DMRI=${CMAKE_BINARY_DIR}/librbee.mri
    -P ${CMAKE_SOURCE_DIR}/cmake/merge_archives.cmake
  DEPENDS ${_deps} ${CMAKE_BINARY_DIR}/librbee.mri ${CMAKE_SOURCE_DIR}/cmake/merge_archives.cmake
  COMMENT "Merging the library layers into librbee.a" VERBATIM)
add_custom_target(rbee_archive ALL DEPENDS ${CMAKE_BINARY_DIR}/librbee.a)
install(FILES ${CMAKE_BINARY_DIR}/librbee.a DESTINATION ${CMAKE_INSTALL_LIBDIR})

# rbee.pc: relocatable (the prefix is found from the file's own place). The
# archive is static, so what it needs is public: `pkg-config --cflags --libs
# rbee` links a program.
file(RELATIVE_PATH RBEE_PC_TO_PREFIX "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig" "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/$" "" RBEE_PC_TO_PREFIX "${RBEE_PC_TO_PREFIX}")
# The GPU backends are modules loaded at run time (dlopen), so a program
# links no GPU runtime.
set(RBEE_PC_LIBS "-lpthread -lm -ldl")
configure_file(${CMAKE_SOURCE_DIR}/cmake/rbee.pc.in ${CMAKE_BINARY_DIR}/rbee.pc.in @ONLY)
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/rbee.pc INPUT ${CMAKE_BINARY_DIR}/rbee.pc.in)
install(FILES ${CMAKE_BINARY_DIR}/rbee.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Shell completion and the example service.
install(FILES packaging/bash-completion/rbee DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
install(FILES packaging/systemd/llm-worker-rbee.service packaging/systemd/README.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/systemd)

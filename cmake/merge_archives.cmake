# Runs `ar -M` on an MRI script (create / addlib ... / save): merges static
# libraries into one archive. cmake -DAR=ar -DMRI=script -P merge_archives.cmake
execute_process(COMMAND ${AR} -M INPUT_FILE ${MRI} RESULT_VARIABLE rc ERROR_VARIABLE msg)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ar -M ${MRI} failed (${rc}): ${msg}")
endif()

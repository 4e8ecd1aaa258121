# Writes the first 4 KiB of IN to OUT: an ELF file that stops before its sections.
execute_process(COMMAND head -c 4096 "${IN}" OUTPUT_FILE "${OUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cannot truncate ${IN}")
endif()

# Copies IN to OUT with the ELF header's e_machine rewritten: a library built for another machine.
# Patching the stub is preferred to cross-building a plugin: a cross compiler (Debian's
# gcc-aarch64-linux-gnu) is a heavy dependency for CI to carry for one test file, and the loader
# refuses a foreign library from its header alone, before dlopen sees it.
# The other machine is aarch64 (EM_AARCH64 = 183), or x86-64 (EM_X86_64 = 62) where the stub is
# aarch64 already. e_machine is the 2-byte field at offset 18, in the byte order that EI_DATA
# (offset 5) names: 1 little-endian, 2 big-endian.
file(READ "${IN}" magic OFFSET 0 LIMIT 4 HEX)
if(NOT magic STREQUAL "7f454c46")
  message(FATAL_ERROR "${IN} is not an ELF file")
endif()
file(READ "${IN}" data OFFSET 5 LIMIT 1 HEX)
file(READ "${IN}" machine OFFSET 18 LIMIT 2 HEX)
if(machine STREQUAL "b700" OR machine STREQUAL "00b7")
  set(octal "076")  # EM_X86_64 = 62 = 0x3e
  set(hex "3e")
else()
  set(octal "267")  # EM_AARCH64 = 183 = 0xb7
  set(hex "b7")
endif()
if(data STREQUAL "01")
  set(bytes "\\${octal}\\000")
  set(want "${hex}00")
elseif(data STREQUAL "02")
  set(bytes "\\000\\${octal}")
  set(want "00${hex}")
else()
  message(FATAL_ERROR "${IN}: unknown ELF byte order ${data}")
endif()
file(COPY_FILE "${IN}" "${OUT}")
# CMake strings cannot hold a NUL byte: printf writes the two bytes, dd puts them in place.
execute_process(
  COMMAND printf "${bytes}"
  COMMAND dd "of=${OUT}" bs=1 seek=18 count=2 conv=notrunc status=none
  RESULT_VARIABLE rc)
file(READ "${OUT}" patched OFFSET 18 LIMIT 2 HEX)
if(NOT rc EQUAL 0 OR NOT patched STREQUAL want)
  message(FATAL_ERROR "cannot rewrite the machine of ${OUT}: e_machine is ${patched}, want ${want}")
endif()

// ELF pre-check for plugin libraries: magic, class, byte order, machine, type, and that every
// loadable segment and the section table lie inside the file.
#include "elf_check.hpp"

#include <cstring>
#include <fstream>
#include <vector>

#if defined(__linux__)
#include <elf.h>
#endif

namespace hcr::detail {

#if defined(__linux__)
namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#elif defined(__powerpc64__)
constexpr uint16_t kHostMachine = EM_PPC64;
#elif defined(__riscv)
constexpr uint16_t kHostMachine = EM_RISCV;
#else
constexpr uint16_t kHostMachine = 0;  // unknown: skip the machine check
#endif

std::string machine_name(uint16_t m) {
  switch (m) {
    case EM_386: return "x86 (32-bit)";
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "aarch64";
    case EM_ARM: return "arm";
    case EM_PPC64: return "ppc64";
    case EM_RISCV: return "riscv";
    case EM_S390: return "s390";
    default: return "machine " + std::to_string(m);
  }
}

}  // namespace

std::string elf_problem(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "cannot open: " + std::string(std::strerror(errno));
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char ident[EI_NIDENT] = {};
  if (size < sizeof(Elf64_Ehdr) || !in.read(reinterpret_cast<char*>(ident), EI_NIDENT) ||
      std::memcmp(ident, ELFMAG, SELFMAG) != 0)
    return "not an ELF shared library";
  if (ident[EI_CLASS] != (sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32))
    return ident[EI_CLASS] == ELFCLASS32 ? "a 32-bit library; this runtime is 64-bit"
                                         : "a library of another word size";
  if (sizeof(void*) != 8) return {};  // the detailed checks below read 64-bit headers
  const bool little = [] {
    uint16_t x = 1;
    return *reinterpret_cast<unsigned char*>(&x) == 1;
  }();
  if (ident[EI_DATA] != (little ? ELFDATA2LSB : ELFDATA2MSB))
    return "a library of the other byte order";

  Elf64_Ehdr eh{};
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(&eh), sizeof eh)) return "truncated ELF header";
  if (kHostMachine != 0 && eh.e_machine != kHostMachine)
    return "built for " + machine_name(eh.e_machine) + ", this machine is " +
           machine_name(kHostMachine);
  if (eh.e_type != ET_DYN)
    return "not a shared library (ELF type " + std::to_string(eh.e_type) + ")";
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0) return "no usable program headers";
  const uint64_t ph_end = eh.e_phoff + uint64_t{eh.e_phnum} * eh.e_phentsize;
  if (eh.e_phoff > size || ph_end > size)
    return "truncated: program headers end at byte " + std::to_string(ph_end) + ", file has " +
           std::to_string(size);
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  in.seekg(static_cast<std::streamoff>(eh.e_phoff));
  if (!in.read(reinterpret_cast<char*>(ph.data()),
               static_cast<std::streamsize>(ph.size() * sizeof(Elf64_Phdr))))
    return "truncated program headers";
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type != PT_LOAD && p.p_type != PT_DYNAMIC) continue;
    const uint64_t end = p.p_offset + p.p_filesz;
    if (end < p.p_offset || end > size)
      return "truncated: a segment ends at byte " + std::to_string(end) + ", file has " +
             std::to_string(size);
  }
  if (eh.e_shoff != 0) {
    const uint64_t sh_end = eh.e_shoff + uint64_t{eh.e_shnum} * eh.e_shentsize;
    if (eh.e_shoff > size || sh_end > size)
      return "truncated: section headers end at byte " + std::to_string(sh_end) + ", file has " +
             std::to_string(size);
  }
  return {};
}

#else
std::string elf_problem(const std::filesystem::path&) { return {}; }
#endif

}  // namespace hcr::detail

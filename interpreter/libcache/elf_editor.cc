#include "interpreter/libcache/elf_editor.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "chorus/common/file_util.h"

namespace chorus::elf {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = EM_AARCH64;
#else
#error "chorus supports x86-64 and aarch64 Linux"
#endif

// True when [offset, offset + length) lies inside a file of `size` bytes.
bool InFile(uint64_t offset, uint64_t length, size_t size) {
  return offset <= size && length <= size - offset;
}

}  // namespace

// Where the dynamic-linking structures live, as file offsets.
struct ElfEditor::Layout {
  const Elf64_Ehdr* ehdr = nullptr;
  Elf64_Dyn* dynamic = nullptr;
  size_t dynamic_count = 0;
  uint64_t dynstr_offset = 0;
  uint64_t dynstr_size = 0;
  Elf64_Sym* dynsym = nullptr;
  size_t dynsym_count = 0;
};

namespace {

// Translates a virtual address to a file offset through the PT_LOAD segments.
bool VaddrToOffset(const uint8_t* data, const Elf64_Ehdr& ehdr, uint64_t vaddr, uint64_t* offset) {
  auto* phdrs = reinterpret_cast<const Elf64_Phdr*>(data + ehdr.e_phoff);
  for (int i = 0; i < ehdr.e_phnum; ++i) {
    const Elf64_Phdr& ph = phdrs[i];
    if (ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) {
      *offset = vaddr - ph.p_vaddr + ph.p_offset;
      return true;
    }
  }
  return false;
}

// Counts dynamic symbols from the DT_GNU_HASH table: one past the highest
// symbol index any hash chain reaches.
size_t CountSymbolsFromGnuHash(const uint8_t* data, size_t size, uint64_t offset) {
  if (!InFile(offset, 16, size)) return 0;
  auto* words = reinterpret_cast<const uint32_t*>(data + offset);
  uint32_t nbuckets = words[0], symoffset = words[1], bloom_size = words[2];
  uint64_t buckets_at = offset + 16 + uint64_t{bloom_size} * 8;
  if (!InFile(buckets_at, uint64_t{nbuckets} * 4, size)) return 0;
  auto* buckets = reinterpret_cast<const uint32_t*>(data + buckets_at);
  uint32_t last = 0;
  for (uint32_t i = 0; i < nbuckets; ++i) last = std::max(last, buckets[i]);
  if (last < symoffset) return symoffset;
  uint64_t chains_at = buckets_at + uint64_t{nbuckets} * 4;
  while (true) {
    uint64_t at = chains_at + uint64_t{last - symoffset} * 4;
    if (!InFile(at, 4, size)) return 0;
    if (*reinterpret_cast<const uint32_t*>(data + at) & 1) return last + 1;
    ++last;
  }
}

StatusOr<std::unique_ptr<ElfEditor::Layout>> ParseLayout(const std::string& path, uint8_t* data,
                                                         size_t size) {
  auto bad = [&](const std::string& why) { return InvalidArgumentError(path + ": " + why); };
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(data, ELFMAG, SELFMAG) != 0) {
    return bad("not an ELF file");
  }
  auto* ehdr = reinterpret_cast<const Elf64_Ehdr*>(data);
  if (ehdr->e_ident[EI_CLASS] != ELFCLASS64 || ehdr->e_ident[EI_DATA] != ELFDATA2LSB) {
    return bad("only 64-bit little-endian ELF is supported");
  }
  if (ehdr->e_type != ET_DYN) return bad("not a shared object");
  if (ehdr->e_machine != kHostMachine) return bad("built for another machine");
  if (ehdr->e_phentsize != sizeof(Elf64_Phdr) ||
      !InFile(ehdr->e_phoff, uint64_t{ehdr->e_phnum} * sizeof(Elf64_Phdr), size)) {
    return bad("program headers out of range");
  }

  auto layout = std::make_unique<ElfEditor::Layout>();
  layout->ehdr = ehdr;
  auto* phdrs = reinterpret_cast<const Elf64_Phdr*>(data + ehdr->e_phoff);
  for (int i = 0; i < ehdr->e_phnum; ++i) {
    if (phdrs[i].p_type != PT_DYNAMIC) continue;
    if (!InFile(phdrs[i].p_offset, phdrs[i].p_filesz, size)) return bad("PT_DYNAMIC out of range");
    layout->dynamic = reinterpret_cast<Elf64_Dyn*>(data + phdrs[i].p_offset);
    layout->dynamic_count = phdrs[i].p_filesz / sizeof(Elf64_Dyn);
  }
  if (layout->dynamic == nullptr) return bad("no PT_DYNAMIC segment");

  uint64_t strtab = 0, symtab = 0, hash = 0, gnu_hash = 0;
  for (size_t i = 0; i < layout->dynamic_count && layout->dynamic[i].d_tag != DT_NULL; ++i) {
    const Elf64_Dyn& d = layout->dynamic[i];
    if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
    if (d.d_tag == DT_STRSZ) layout->dynstr_size = d.d_un.d_val;
    if (d.d_tag == DT_SYMTAB) symtab = d.d_un.d_ptr;
    if (d.d_tag == DT_HASH) hash = d.d_un.d_ptr;
    if (d.d_tag == DT_GNU_HASH) gnu_hash = d.d_un.d_ptr;
  }
  if (!VaddrToOffset(data, *ehdr, strtab, &layout->dynstr_offset) ||
      !InFile(layout->dynstr_offset, layout->dynstr_size, size)) {
    return bad("DT_STRTAB out of range");
  }

  uint64_t symtab_offset = 0;
  if (symtab != 0 && VaddrToOffset(data, *ehdr, symtab, &symtab_offset)) {
    size_t count = 0;
    uint64_t table_offset = 0;
    if (hash != 0 && VaddrToOffset(data, *ehdr, hash, &table_offset) &&
        InFile(table_offset, 8, size)) {
      count = reinterpret_cast<const uint32_t*>(data + table_offset)[1];  // nchain
    } else if (gnu_hash != 0 && VaddrToOffset(data, *ehdr, gnu_hash, &table_offset)) {
      count = CountSymbolsFromGnuHash(data, size, table_offset);
    }
    if (!InFile(symtab_offset, uint64_t{count} * sizeof(Elf64_Sym), size)) {
      return bad("dynamic symbol table out of range");
    }
    layout->dynsym = reinterpret_cast<Elf64_Sym*>(data + symtab_offset);
    layout->dynsym_count = count;
  }
  return layout;
}

}  // namespace

StatusOr<std::unique_ptr<ElfEditor>> ElfEditor::Open(const std::string& path, Mode mode) {
  bool writable = mode == Mode::kReadWrite;
  UniqueFd fd(::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + path, errno);
  size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return InvalidArgumentError(path + ": empty file");
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, writable ? MAP_SHARED : MAP_PRIVATE,
                     fd.get(), 0);
  if (map == MAP_FAILED) return ErrnoError("mmap " + path, errno);
  auto* data = static_cast<uint8_t*>(map);
  auto layout = ParseLayout(path, data, size);
  if (!layout.ok()) {
    ::munmap(map, size);
    return layout.status();
  }
  return std::unique_ptr<ElfEditor>(new ElfEditor(path, data, size, std::move(*layout)));
}

ElfEditor::ElfEditor(std::string path, uint8_t* data, size_t size, std::unique_ptr<Layout> layout)
    : path_(std::move(path)), data_(data), size_(size), layout_(std::move(layout)) {}

ElfEditor::~ElfEditor() { ::munmap(data_, size_); }

namespace {

// The NUL-terminated string at `offset` in .dynstr, bounded by the table.
std::string_view DynString(const uint8_t* data, uint64_t table, uint64_t table_size,
                           uint64_t offset) {
  if (offset >= table_size) return {};
  const char* start = reinterpret_cast<const char*>(data + table + offset);
  return std::string_view(start, strnlen(start, table_size - offset));
}

}  // namespace

std::string ElfEditor::Soname() const {
  for (size_t i = 0; i < layout_->dynamic_count && layout_->dynamic[i].d_tag != DT_NULL; ++i) {
    if (layout_->dynamic[i].d_tag == DT_SONAME) {
      return std::string(DynString(data_, layout_->dynstr_offset, layout_->dynstr_size,
                                   layout_->dynamic[i].d_un.d_val));
    }
  }
  return "";
}

std::string ElfEditor::SearchPath() const {
  std::string rpath;
  for (size_t i = 0; i < layout_->dynamic_count && layout_->dynamic[i].d_tag != DT_NULL; ++i) {
    const Elf64_Dyn& d = layout_->dynamic[i];
    if (d.d_tag != DT_RUNPATH && d.d_tag != DT_RPATH) continue;
    std::string value(DynString(data_, layout_->dynstr_offset, layout_->dynstr_size, d.d_un.d_val));
    if (d.d_tag == DT_RUNPATH) return value;  // DT_RPATH is ignored when both exist
    rpath = value;
  }
  return rpath;
}

std::vector<std::string> ElfEditor::Needed() const {
  std::vector<std::string> needed;
  for (size_t i = 0; i < layout_->dynamic_count && layout_->dynamic[i].d_tag != DT_NULL; ++i) {
    if (layout_->dynamic[i].d_tag == DT_NEEDED) {
      needed.emplace_back(DynString(data_, layout_->dynstr_offset, layout_->dynstr_size,
                                    layout_->dynamic[i].d_un.d_val));
    }
  }
  return needed;
}

std::vector<std::string> ElfEditor::UniqueSymbols() const {
  std::vector<std::string> names;
  for (size_t i = 0; i < layout_->dynsym_count; ++i) {
    const Elf64_Sym& sym = layout_->dynsym[i];
    if (ELF64_ST_BIND(sym.st_info) == STB_GNU_UNIQUE) {
      names.emplace_back(
          DynString(data_, layout_->dynstr_offset, layout_->dynstr_size, sym.st_name));
    }
  }
  return names;
}

// The linker merges string tails in .dynstr ("libfoo.so" may also serve as the
// tail of "libbarlibfoo.so"); a string some other name points into must not be
// rewritten in place.
bool ElfEditor::DynstrOffsetShared(uint64_t offset, size_t length) const {
  auto inside = [&](uint64_t at) { return at > offset && at <= offset + length; };
  for (size_t i = 0; i < layout_->dynsym_count; ++i) {
    if (inside(layout_->dynsym[i].st_name)) return true;
  }
  for (size_t i = 0; i < layout_->dynamic_count && layout_->dynamic[i].d_tag != DT_NULL; ++i) {
    int64_t tag = layout_->dynamic[i].d_tag;
    bool is_string = tag == DT_NEEDED || tag == DT_SONAME || tag == DT_RPATH || tag == DT_RUNPATH;
    if (is_string && inside(layout_->dynamic[i].d_un.d_val)) return true;
  }
  return false;
}

Status ElfEditor::RewriteDynamicString(int64_t tag, std::string_view from, std::string_view to) {
  for (size_t i = 0; i < layout_->dynamic_count && layout_->dynamic[i].d_tag != DT_NULL; ++i) {
    Elf64_Dyn& d = layout_->dynamic[i];
    if (d.d_tag != tag) continue;
    std::string_view current =
        DynString(data_, layout_->dynstr_offset, layout_->dynstr_size, d.d_un.d_val);
    if (tag == DT_NEEDED && current != from) continue;
    if (to.size() > current.size()) {
      return InvalidArgumentError(path_ + ": \"" + std::string(to) + "\" is longer than \"" +
                                  std::string(current) + "\"; only in-place edits are allowed");
    }
    if (DynstrOffsetShared(d.d_un.d_val, current.size())) {
      return FailedPreconditionError(path_ + ": \"" + std::string(current) +
                                     "\" shares bytes with another string; cannot edit in place");
    }
    char* bytes = reinterpret_cast<char*>(data_ + layout_->dynstr_offset + d.d_un.d_val);
    std::memset(bytes, 0, current.size());
    std::memcpy(bytes, to.data(), to.size());
    return OkStatus();
  }
  return NotFoundError(path_ + ": no dynamic entry \"" + std::string(from) + "\"");
}

Status ElfEditor::SetSoname(std::string_view name) {
  std::string current = Soname();
  if (current.empty()) return NotFoundError(path_ + ": no DT_SONAME");
  return RewriteDynamicString(DT_SONAME, current, name);
}

Status ElfEditor::ReplaceNeeded(std::string_view from, std::string_view to) {
  return RewriteDynamicString(DT_NEEDED, from, to);
}

int ElfEditor::RebindUniqueAsGlobal() {
  int count = 0;
  for (size_t i = 0; i < layout_->dynsym_count; ++i) {
    Elf64_Sym& sym = layout_->dynsym[i];
    if (ELF64_ST_BIND(sym.st_info) == STB_GNU_UNIQUE) {
      sym.st_info = ELF64_ST_INFO(STB_GLOBAL, ELF64_ST_TYPE(sym.st_info));
      ++count;
    }
  }
  return count;
}

Status ElfEditor::RenameUndefinedSymbol(std::string_view from, std::string_view to) {
  if (to.size() > from.size()) {
    return InvalidArgumentError(path_ + ": symbol \"" + std::string(to) + "\" is longer than \"" +
                                std::string(from) + "\"");
  }
  for (size_t i = 0; i < layout_->dynsym_count; ++i) {
    const Elf64_Sym& sym = layout_->dynsym[i];
    if (sym.st_shndx != SHN_UNDEF ||
        DynString(data_, layout_->dynstr_offset, layout_->dynstr_size, sym.st_name) != from) {
      continue;
    }
    // Undefined symbols are not in the hash tables: renaming the string is
    // the whole edit, provided no other name uses its bytes.
    int users = 0;
    for (size_t j = 0; j < layout_->dynsym_count; ++j) {
      users += layout_->dynsym[j].st_name == sym.st_name ? 1 : 0;
    }
    if (users != 1 || DynstrOffsetShared(sym.st_name, from.size())) {
      return FailedPreconditionError(path_ + ": \"" + std::string(from) +
                                     "\" shares bytes with another string; cannot edit in place");
    }
    char* bytes = reinterpret_cast<char*>(data_ + layout_->dynstr_offset + sym.st_name);
    std::memset(bytes, 0, from.size());
    std::memcpy(bytes, to.data(), to.size());
    return OkStatus();
  }
  return NotFoundError(path_ + ": no undefined symbol \"" + std::string(from) + "\"");
}

Status ElfEditor::ReplaceConstantString(std::string_view from, std::string_view to) {
  if (from.empty() || to.size() > from.size()) {
    return InvalidArgumentError("constant \"" + std::string(to) + "\" does not fit in \"" +
                                std::string(from) + "\"");
  }
  // A whole literal: NUL-terminated and preceded by a NUL or the segment's
  // start, never the tail of a longer string.
  std::string needle(from);
  needle.push_back('\0');
  uint8_t* found = nullptr;
  int count = 0;
  auto* phdrs = reinterpret_cast<const Elf64_Phdr*>(data_ + layout_->ehdr->e_phoff);
  for (int i = 0; i < layout_->ehdr->e_phnum; ++i) {
    const Elf64_Phdr& ph = phdrs[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & (PF_W | PF_X)) != 0 ||
        !InFile(ph.p_offset, ph.p_filesz, size_)) {
      continue;
    }
    std::string_view segment(reinterpret_cast<char*>(data_ + ph.p_offset), ph.p_filesz);
    for (size_t at = segment.find(needle); at != std::string_view::npos;
         at = segment.find(needle, at + 1)) {
      uint64_t offset = ph.p_offset + at;
      bool in_dynstr = offset >= layout_->dynstr_offset &&
                       offset < layout_->dynstr_offset + layout_->dynstr_size;
      if ((at > 0 && segment[at - 1] != '\0') || in_dynstr) continue;
      found = data_ + offset;
      ++count;
    }
  }
  if (count != 1) {
    return NotFoundError(path_ + ": expected one constant \"" + std::string(from) + "\", found " +
                         std::to_string(count));
  }
  std::memset(found, 0, from.size());
  std::memcpy(found, to.data(), to.size());
  return OkStatus();
}

Status ElfEditor::Sync() {
  if (::msync(data_, size_, MS_SYNC) != 0) return ErrnoError("msync " + path_, errno);
  return OkStatus();
}

// Layout of a scope object (all at vaddr == file offset, one RW PT_LOAD):
//   Elf64_Ehdr | 3 x Elf64_Phdr | .dynsym (1 null symbol) | .hash (empty) |
//   .dynstr | .dynamic (DT_NEEDED..., DT_HASH, DT_STRTAB, DT_SYMTAB, DT_STRSZ,
//   DT_SYMENT, DT_NULL)
// The segment holding .dynamic must be writable: ld.so relocates its entries in
// place. PT_GNU_STACK keeps glibc from making the stack executable.
Status WriteScopeObject(const std::string& path, const std::vector<std::string>& needed) {
  constexpr size_t kPhnum = 3;
  const size_t symtab_at = sizeof(Elf64_Ehdr) + kPhnum * sizeof(Elf64_Phdr);
  const size_t hash_at = symtab_at + sizeof(Elf64_Sym);
  const size_t strtab_at = hash_at + 4 * sizeof(uint32_t);
  std::string strtab(1, '\0');
  std::vector<uint64_t> needed_offsets;
  for (const std::string& name : needed) {
    if (name.empty() || name.find('\0') != std::string::npos) {
      return InvalidArgumentError("scope object: bad needed name");
    }
    needed_offsets.push_back(strtab.size());
    strtab += name;
    strtab.push_back('\0');
  }
  const size_t dynamic_at = (strtab_at + strtab.size() + 7) & ~size_t{7};
  std::vector<Elf64_Dyn> dynamic;
  for (uint64_t offset : needed_offsets) dynamic.push_back({DT_NEEDED, {offset}});
  dynamic.push_back({DT_HASH, {hash_at}});
  dynamic.push_back({DT_STRTAB, {strtab_at}});
  dynamic.push_back({DT_SYMTAB, {symtab_at}});
  dynamic.push_back({DT_STRSZ, {strtab.size()}});
  dynamic.push_back({DT_SYMENT, {sizeof(Elf64_Sym)}});
  dynamic.push_back({DT_NULL, {0}});
  const size_t dynamic_size = dynamic.size() * sizeof(Elf64_Dyn);
  const size_t total = dynamic_at + dynamic_size;

  std::string image(total, '\0');
  auto* ehdr = reinterpret_cast<Elf64_Ehdr*>(image.data());
  std::memcpy(ehdr->e_ident, ELFMAG, SELFMAG);
  ehdr->e_ident[EI_CLASS] = ELFCLASS64;
  ehdr->e_ident[EI_DATA] = ELFDATA2LSB;
  ehdr->e_ident[EI_VERSION] = EV_CURRENT;
  ehdr->e_ident[EI_OSABI] = ELFOSABI_SYSV;
  ehdr->e_type = ET_DYN;
  ehdr->e_machine = kHostMachine;
  ehdr->e_version = EV_CURRENT;
  ehdr->e_phoff = sizeof(Elf64_Ehdr);
  ehdr->e_ehsize = sizeof(Elf64_Ehdr);
  ehdr->e_phentsize = sizeof(Elf64_Phdr);
  ehdr->e_phnum = kPhnum;

  auto* phdrs = reinterpret_cast<Elf64_Phdr*>(image.data() + sizeof(Elf64_Ehdr));
  phdrs[0] = {PT_LOAD, PF_R | PF_W, 0, 0, 0, total, total, 0x1000};
  phdrs[1] = {PT_DYNAMIC, PF_R | PF_W,  dynamic_at,   dynamic_at,
              dynamic_at, dynamic_size, dynamic_size, 8};
  phdrs[2] = {PT_GNU_STACK, PF_R | PF_W, 0, 0, 0, 0, 0, 16};

  // .dynsym holds only the mandatory null symbol; .hash: nbucket = nchain = 1.
  auto* hash = reinterpret_cast<uint32_t*>(image.data() + hash_at);
  hash[0] = 1;
  hash[1] = 1;
  std::memcpy(image.data() + strtab_at, strtab.data(), strtab.size());
  std::memcpy(image.data() + dynamic_at, dynamic.data(), dynamic_size);
  return WriteFileAtomically(path, image);
}

}  // namespace chorus::elf

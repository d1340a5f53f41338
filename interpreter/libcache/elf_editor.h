// In-place edits of ELF shared objects, and the tiny "scope" objects chorus
// generates. See docs/interpreter.md, "Loading an interpreter".
//
// Every edit keeps the file's size and layout: strings are rewritten inside
// their existing bytes, symbol bindings inside their existing entries. Only
// 64-bit little-endian objects are supported (x86-64, aarch64).
#ifndef CHORUS_INTERPRETER_ELF_EDITOR_H_
#define CHORUS_INTERPRETER_ELF_EDITOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/common/status.h"

namespace chorus::elf {

// An ELF shared object mapped read-write. Edits go straight to the file.
// Not thread-safe; one editor per file at a time.
class ElfEditor {
 public:
  enum class Mode { kReadWrite, kReadOnly };
  // Maps `path` and validates its headers. In kReadOnly mode edits change
  // only this process' private view, never the file.
  static StatusOr<std::unique_ptr<ElfEditor>> Open(const std::string& path,
                                                   Mode mode = Mode::kReadWrite);
  ~ElfEditor();
  ElfEditor(const ElfEditor&) = delete;
  ElfEditor& operator=(const ElfEditor&) = delete;

  // DT_SONAME, or "" when the object has none.
  std::string Soname() const;
  // DT_NEEDED entries in order.
  std::vector<std::string> Needed() const;
  // DT_RUNPATH, else DT_RPATH, as written ($ORIGIN unexpanded), or "".
  std::string SearchPath() const;
  // Names of dynamic symbols bound STB_GNU_UNIQUE.
  std::vector<std::string> UniqueSymbols() const;

  // Rewrites DT_SONAME. `name` must not be longer than the current one.
  Status SetSoname(std::string_view name);
  // Rewrites the DT_NEEDED entry equal to `from`. NotFound if absent;
  // InvalidArgument if `to` is longer than `from`.
  Status ReplaceNeeded(std::string_view from, std::string_view to);
  // Rebinds every STB_GNU_UNIQUE dynamic symbol as STB_GLOBAL, so that the
  // dynamic loader keeps one instance per loaded copy instead of one per process.
  // Returns how many symbols were rebound.
  int RebindUniqueAsGlobal();
  // Renames the undefined dynamic symbol `from`, so that the object binds
  // that reference to `to` instead. NotFound if absent; InvalidArgument if
  // `to` is longer; FailedPrecondition if the name shares bytes with another.
  Status RenameUndefinedSymbol(std::string_view from, std::string_view to);
  // Rewrites the one NUL-terminated string constant equal to `from` in the
  // read-only data. NotFound unless there is exactly one; InvalidArgument if
  // `to` is longer than `from`.
  Status ReplaceConstantString(std::string_view from, std::string_view to);
  // Flushes edits to the file.
  Status Sync();

  // Where the dynamic-linking structures are (opaque outside elf_editor.cc).
  struct Layout;

 private:
  ElfEditor(std::string path, uint8_t* data, size_t size, std::unique_ptr<Layout> layout);
  Status RewriteDynamicString(int64_t tag, std::string_view from, std::string_view to);
  bool DynstrOffsetShared(uint64_t offset, size_t length) const;

  std::string path_;
  uint8_t* data_;
  size_t size_;
  std::unique_ptr<Layout> layout_;
};

// Writes a minimal shared object whose only content is DT_NEEDED entries, in
// order. dlopen()ing it loads those objects (absolute paths) with the object as
// the root of their lookup scope. Written atomically (temporary file + rename).
Status WriteScopeObject(const std::string& path, const std::vector<std::string>& needed);

}  // namespace chorus::elf

#endif  // CHORUS_INTERPRETER_ELF_EDITOR_H_

// The on-disk cache of per-interpreter library copies.
//
// Interpreter k loads private copies of libpython, libtorch_python, chorus'
// Python side and every C extension it imports, edited in place so that the
// dynamic loader keeps them apart (docs/interpreter.md). Copies are made once
// and reused across runs: each lives under a key derived from the source
// file's identity (path, size, mtime, inode), the slot and the edit recipe, so
// a changed source gets a fresh copy. Copies are built under a temporary name
// and renamed into place, so concurrent preparers (threads or processes) are
// safe and a reader never sees a half-written file. Each copy's directory
// records its source's identity, so copies that can never be used again (the
// source changed or is gone: an upgraded or deleted venv) can be pruned; some
// extensions are large (triton's is 500 MB), so they must not pile up.
#ifndef CHORUS_INTERPRETER_LIBRARY_CACHE_H_
#define CHORUS_INTERPRETER_LIBRARY_CACHE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "chorus/common/status.h"

namespace chorus {

// How a copy differs from its source.
struct CopyRecipe {
  std::string soname;                            // new DT_SONAME; "" keeps it
  std::map<std::string, std::string> needed;     // DT_NEEDED renames, old -> new
  bool rebind_unique_symbols = true;             // STB_GNU_UNIQUE -> STB_GLOBAL
  std::map<std::string, std::string> constants;  // read-only string constants, old -> new
  std::map<std::string, std::string> imports;    // undefined symbols, old -> new (if imported)
};

// A prepared copy.
struct PreparedCopy {
  std::string path;                 // absolute path of the copy
  std::vector<std::string> needed;  // its DT_NEEDED entries after the edits
};

// Thread-safe (it keeps no state but the directory).
class LibraryCache {
 public:
  explicit LibraryCache(std::string root);

  // $XDG_CACHE_HOME/chorus, else $HOME/.cache/chorus.
  static std::string DefaultRoot();

  // Returns the copy of `source` for `slot` made with `recipe`, making it if
  // it does not exist. Errors: source unreadable or not an ELF shared object;
  // a rename that cannot be done in place; cache directory not writable.
  StatusOr<PreparedCopy> Prepare(const std::string& source, int slot, const CopyRecipe& recipe);

  // Returns a scope object (elf_editor.h) needing `paths` in order, making it
  // if it does not exist.
  StatusOr<std::string> PrepareScope(const std::vector<std::string>& paths);

  // Removes every copy whose source changed or is gone, and copies of an
  // older format; returns the bytes freed. Safe while other processes
  // prepare or use the cache: a live copy is never stale, and a process that
  // still maps a pruned copy keeps it until it exits.
  StatusOr<uint64_t> PruneStale();

  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// The SONAME slot `slot` gives its copy of a library called `soname`: unique
// per slot and never longer than `soname` ("libtorch_python.so.1.13" ->
// "libtorch_python.so.c3", "libz.so.1" -> "libz.c3", and with the stem
// shortened when nothing else fits: "libtorch_python.so" -> "libtorch_pytho.c10"),
// so it can be written in place.
StatusOr<std::string> SlotSoname(const std::string& soname, int slot);

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_LIBRARY_CACHE_H_

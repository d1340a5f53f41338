// Sharing the unchanged pages of a library copy with its source.
//
// Each interpreter maps its own copies of libpython, libtorch_python and
// every C extension (library_cache.h), and a copy's pages are its own file's:
// the kernel keeps one page-cache copy per file, so every interpreter paid
// again for code that is byte for byte its source's (about 20 MiB per
// interpreter with torch 2.14). Once a copy is loaded, the read-only and
// executable pages that equal the source's at the same file offset are mapped
// from the source file instead; only the edited pages (the dynamic symbol and
// string tables, read-only relocations) stay the copy's. The process reads
// the same bytes at the same addresses before and after.
#ifndef CHORUS_INTERPRETER_SHARED_PAGES_H_
#define CHORUS_INTERPRETER_SHARED_PAGES_H_

#include <string>

#include "chorus/common/status.h"

namespace chorus {

// Maps every page of this process's read-only or executable mappings of
// `copy` whose bytes equal `source`'s at the same file offset from `source`
// (private, same protection, same address). Returns the MiB now mapped from
// `source`. Errors: either file cannot be opened, a remap fails (the pages
// before it stay remapped, the rest the copy's). Any thread; the bytes at
// every address stay the same throughout, so code may run in the copy
// meanwhile.
StatusOr<double> ShareUnchangedPages(const std::string& copy, const std::string& source);

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_SHARED_PAGES_H_

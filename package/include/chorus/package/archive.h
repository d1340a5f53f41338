// package/: model files, from the archive's bytes to a callable model. The
// reader (this header) validates and maps an archive; model_format.h lists the
// formats and what each is called; dtype.h and manifest.h are the package
// format's tables; package/model (chorus/package/model.h) loads a model from
// any format onto the interpreters or libtorch.
//
// A validated, memory-mapped view of a package archive (a zip file, read by
// ZipFile: zip_file.h).
//
// Archives come from outside, so Open() checks everything it can before any
// byte is used: what ZipFile checks (zip structure via libzip, names: no
// absolute paths, no "..", no duplicates, no NUL; declared against actual
// sizes, compression ratio (zip bombs), encryption (refused)), that every
// record sits under one top folder, CRCs of the small records, and the
// manifest's schema. Each failure is INVALID_ARGUMENT (DATA_LOSS for
// corruption) with a message that starts with what is wrong, e.g. "unsafe
// record name", "duplicate record", "bad CRC", "encrypted record",
// "compression ratio", "truncated", "manifest invalid", "sha256 mismatch".
//
// The file is mapped once (private, read-only content, copy-on-write pages):
// stored (uncompressed) records are served straight from the mapping, so
// tensors made from them share memory with the page cache and with every
// other user of the Archive, in this process and others mapping the file.
// Thread-safe after Open().
#ifndef CHORUS_PACKAGE_ARCHIVE_H_
#define CHORUS_PACKAGE_ARCHIVE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chorus/common/status.h"
#include "chorus/package/manifest.h"
#include "chorus/package/model_format.h"
#include "chorus/package/zip_file.h"

namespace chorus {

struct ArchiveOptions {
  // Verify the CRC of storage records (weights) at Open; other records are
  // always verified. Off by default: it reads every weight byte.
  bool verify_storage_crc = false;
  // Verify every record against the manifest's sha256 at Open (see also
  // Archive::VerifySha256).
  bool verify_sha256 = false;
};

class Archive {
 public:
  // Opens and validates `path`. Errors as described above; NOT_FOUND if the
  // file does not exist.
  static StatusOr<std::shared_ptr<Archive>> Open(const std::string& path,
                                                 const ArchiveOptions& options = {});

  virtual ~Archive() = default;

  const std::string& path() const { return path_; }
  // What the file is, from its records (and its manifest: chorus or stock torch.package).
  ModelFormat format() const { return format_; }
  // The top folder every record sits in ("model/"), as torch writes it.
  const std::string& prefix() const { return prefix_; }
  const std::vector<ArchiveRecord>& records() const { return records_; }
  // The record called `name` (relative), or nullptr.
  const ArchiveRecord* Find(std::string_view name) const;
  // The manifest, if the archive has one (validated at Open).
  const std::optional<Manifest>& manifest() const { return manifest_; }

  // The bytes of record `name`: a view of the mapping for stored records, a
  // decompressed (CRC-checked) copy otherwise. NOT_FOUND if absent.
  StatusOr<RecordData> Read(std::string_view name) const;

  // Checks every record against the manifest's sha256 and size.
  // FAILED_PRECONDITION without a manifest; DATA_LOSS on the first mismatch.
  Status VerifySha256() const;

  // Base address and length of the whole mapped file.
  const uint8_t* mapped_data() const { return base_; }
  size_t mapped_size() const { return size_; }

 protected:
  Archive() = default;

  std::string path_;
  ModelFormat format_ = ModelFormat::kTorchPackage;
  std::string prefix_;
  std::vector<ArchiveRecord> records_;
  std::unordered_map<std::string, size_t> index_;  // name -> records_ index
  std::optional<Manifest> manifest_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> mapping_;  // unmaps when the last user is gone
};

}  // namespace chorus

#endif  // CHORUS_PACKAGE_ARCHIVE_H_

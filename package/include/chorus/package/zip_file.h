// A validated, memory-mapped zip file, whatever it holds: what Archive (a
// model archive, archive.h) is built on, and what reads other servers' zip
// archives (TorchServe's .mar).
//
// Zip files come from outside, so Open() checks everything it can before any
// byte is used: zip structure (via libzip), names (no absolute paths, no "..",
// no duplicates, no NUL), declared against actual sizes, compression ratio
// (zip bombs), total size, encryption (refused). Each failure is
// INVALID_ARGUMENT (DATA_LOSS for corruption) with a message that starts with
// what is wrong ("unsafe record name", "duplicate record", "compression
// ratio", "truncated"...) and ends "in <path>". CRCs are checked as records
// are read (Read, ExtractTo) or by VerifyCrc.
//
// The file is mapped once (private, read-only content, copy-on-write pages);
// stored (uncompressed) records are served straight from the mapping.
// Thread-safe after Open().
#ifndef CHORUS_PACKAGE_ZIP_FILE_H_
#define CHORUS_PACKAGE_ZIP_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chorus/common/status.h"

namespace chorus {

// One record (zip entry).
struct ArchiveRecord {
  std::string name;   // ZipFile: as in the file; Archive: relative to its top folder
  uint64_t size = 0;  // uncompressed size
  uint64_t compressed_size = 0;
  uint64_t data_offset = 0;  // file offset of the (possibly compressed) data
  uint32_t crc32 = 0;
  bool stored = false;  // compression method "stored": data is mapped as is
};

// A record's bytes and what keeps them alive.
struct RecordData {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;  // the mapping, or a decompressed copy
};

class ZipFile {
 public:
  // Opens and validates `path`. Errors as described above; NOT_FOUND if the
  // file does not exist.
  static StatusOr<std::shared_ptr<const ZipFile>> Open(const std::string& path);

  virtual ~ZipFile() = default;

  const std::string& path() const { return path_; }
  // Every record, in the file's order, named as in the file.
  const std::vector<ArchiveRecord>& records() const { return records_; }
  // The record called `name`, or nullptr.
  const ArchiveRecord* Find(std::string_view name) const;

  // The bytes of `record` (one of records()): a view of the mapping for a
  // stored record (its CRC is not checked: see VerifyCrc), a decompressed,
  // CRC-checked copy otherwise. DATA_LOSS for a corrupt record.
  virtual StatusOr<RecordData> Read(const ArchiveRecord& record) const = 0;
  // DATA_LOSS unless `record`'s bytes match its CRC (reads them all).
  Status VerifyCrc(const ArchiveRecord& record) const;

  // Writes every record, CRC-checked, into `folder`, which must be empty or
  // absent (its parent must exist): a record whose name ends in '/' is a
  // folder. Files are created, never followed through a link. ALREADY_EXISTS
  // for a folder that is not empty; on any other error `folder` is removed.
  Status ExtractTo(const std::string& folder) const;

  // The whole mapped file, and what keeps the mapping alive.
  const uint8_t* mapped_data() const { return base_; }
  size_t mapped_size() const { return size_; }
  const std::shared_ptr<const void>& mapping() const { return mapping_; }

 protected:
  ZipFile() = default;

  std::string path_;
  std::vector<ArchiveRecord> records_;
  std::unordered_map<std::string, size_t> index_;  // name -> records_ index
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::shared_ptr<const void> mapping_;  // unmaps when the last user is gone
};

}  // namespace chorus

#endif  // CHORUS_PACKAGE_ZIP_FILE_H_

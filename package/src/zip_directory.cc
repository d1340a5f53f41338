#include "package/src/zip_directory.h"

#include <algorithm>
#include <cstring>

namespace chorus::zip {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr size_t kEndOfDirectorySize = 22;
constexpr size_t kDirectoryEntrySize = 46;
constexpr size_t kLocalHeaderSize = 30;

// Bounds-checked little-endian reads over the file.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool Has(uint64_t offset, uint64_t length) const {
    return offset <= size_ && length <= size_ - offset;
  }
  uint16_t U16(uint64_t at) const { return static_cast<uint16_t>(data_[at] | data_[at + 1] << 8); }
  uint32_t U32(uint64_t at) const {
    return static_cast<uint32_t>(U16(at)) | static_cast<uint32_t>(U16(at + 2)) << 16;
  }
  uint64_t U64(uint64_t at) const {
    return static_cast<uint64_t>(U32(at)) | static_cast<uint64_t>(U32(at + 4)) << 32;
  }
  const uint8_t* At(uint64_t at) const { return data_ + at; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_;
  size_t size_;
};

Status Bad(const std::string& what) { return InvalidArgumentError(what); }

struct Directory {
  uint64_t entries = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

StatusOr<Directory> FindDirectory(const Bytes& file) {
  if (file.size() < kEndOfDirectorySize) return Bad("not a zip archive (too short)");
  // The end record sits at the end, before a comment of at most 64 KiB.
  const uint64_t last = file.size() - kEndOfDirectorySize;
  const uint64_t first = last > 0xffff ? last - 0xffff : 0;
  for (uint64_t at = last + 1; at-- > first;) {
    if (file.U32(at) != kEndOfDirectory) continue;
    if (at + kEndOfDirectorySize + file.U16(at + 20) != file.size()) continue;
    Directory dir{file.U16(at + 10), file.U32(at + 16), file.U32(at + 12)};
    if (file.U16(at + 4) != 0 || file.U16(at + 6) != 0) {
      return Bad("multi-disk zip archives are not supported");
    }
    bool zip64 = dir.entries == 0xffff || dir.offset == 0xffffffff || dir.size == 0xffffffff;
    if (zip64) {
      if (at < 20 || file.U32(at - 20) != kZip64Locator) return Bad("truncated zip64 directory");
      uint64_t end64 = file.U64(at - 20 + 8);
      if (!file.Has(end64, 56) || file.U32(end64) != kZip64EndOfDirectory) {
        return Bad("truncated zip64 directory");
      }
      dir = {file.U64(end64 + 32), file.U64(end64 + 48), file.U64(end64 + 40)};
    }
    if (!file.Has(dir.offset, dir.size)) return Bad("truncated: central directory out of range");
    return dir;
  }
  // A file that starts like a zip but has no directory was cut short.
  if (file.U32(0) == kLocalHeader) return Bad("truncated zip archive (no central directory)");
  return Bad("not a zip archive (no end of central directory)");
}

// Applies the zip64 extended-information extra field to the 0xffffffff fields.
Status ApplyZip64Extra(const Bytes& file, uint64_t extra, uint16_t extra_size, Entry* entry,
                       bool size_max, bool compressed_max, bool offset_max) {
  for (uint64_t at = extra; at + 4 <= extra + extra_size;) {
    uint16_t id = file.U16(at), length = file.U16(at + 2);
    if (at + 4 + length > extra + extra_size) return Bad("inconsistent extra field");
    if (id == kZip64ExtraId) {
      uint64_t field = at + 4, end = field + length;
      auto take = [&](uint64_t* value) {
        if (field + 8 > end) return false;
        *value = file.U64(field);
        field += 8;
        return true;
      };
      if ((size_max && !take(&entry->size)) || (compressed_max && !take(&entry->compressed_size)) ||
          (offset_max && !take(&entry->local_header_offset))) {
        return Bad("inconsistent zip64 extra field");
      }
      return OkStatus();
    }
    at += 4 + length;
  }
  if (size_max || compressed_max || offset_max) return Bad("missing zip64 extra field");
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<Entry>> ReadDirectory(const uint8_t* data, size_t size) {
  Bytes file(data, size);
  CHORUS_ASSIGN_OR_RETURN(Directory dir, FindDirectory(file));
  if (dir.entries > dir.size / kDirectoryEntrySize) {
    return Bad("inconsistent central directory (entry count)");
  }
  std::vector<Entry> entries;
  entries.reserve(dir.entries);
  uint64_t at = dir.offset;
  const uint64_t end = dir.offset + dir.size;
  for (uint64_t i = 0; i < dir.entries; ++i) {
    if (at + kDirectoryEntrySize > end || file.U32(at) != kDirectoryEntry) {
      return Bad("inconsistent central directory (entry " + std::to_string(i) + ")");
    }
    Entry entry;
    entry.flags = file.U16(at + 8);
    entry.method = file.U16(at + 10);
    entry.crc32 = file.U32(at + 16);
    entry.compressed_size = file.U32(at + 20);
    entry.size = file.U32(at + 24);
    uint16_t name_size = file.U16(at + 28), extra_size = file.U16(at + 30);
    uint16_t comment_size = file.U16(at + 32);
    entry.local_header_offset = file.U32(at + 42);
    uint64_t name_at = at + kDirectoryEntrySize;
    uint64_t next = name_at + name_size + extra_size + comment_size;
    if (next > end) return Bad("inconsistent central directory (entry " + std::to_string(i) + ")");
    entry.name.assign(reinterpret_cast<const char*>(file.At(name_at)), name_size);
    CHORUS_RETURN_IF_ERROR(ApplyZip64Extra(
        file, name_at + name_size, extra_size, &entry, entry.size == 0xffffffff,
        entry.compressed_size == 0xffffffff, entry.local_header_offset == 0xffffffff));
    // The local header repeats the name; the data follows it and its extra field.
    uint64_t local = entry.local_header_offset;
    if (!file.Has(local, kLocalHeaderSize) || file.U32(local) != kLocalHeader) {
      return Bad("truncated: local header of " + entry.name + " out of range");
    }
    uint16_t local_name = file.U16(local + 26), local_extra = file.U16(local + 28);
    if (local_name != name_size || !file.Has(local + kLocalHeaderSize, local_name) ||
        std::memcmp(file.At(local + kLocalHeaderSize), entry.name.data(), name_size) != 0) {
      return Bad("inconsistent local header for " + entry.name);
    }
    entry.data_offset = local + kLocalHeaderSize + local_name + local_extra;
    if (!file.Has(entry.data_offset, entry.compressed_size)) {
      return Bad("truncated: data of " + entry.name + " extends past the end of the file");
    }
    entries.push_back(std::move(entry));
    at = next;
  }
  return entries;
}

}  // namespace chorus::zip

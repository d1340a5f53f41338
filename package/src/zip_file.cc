#include "chorus/package/zip_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <set>

#include "chorus/common/file_util.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/package/format.h"
#include "package/src/zip_directory.h"

namespace chorus {
namespace {

namespace fmt = package_format;

Status Corrupt(const std::string& path, const std::string& what) {
  return DataLossError(what + " in " + path);
}
Status Refused(const std::string& path, const std::string& what) {
  return InvalidArgumentError(what + " in " + path);
}

// "unsafe record name" unless `name` is a plain relative path.
bool SafeName(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\0') != std::string::npos ||
      name.find('\\') != std::string::npos) {
    return false;
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string part = name.substr(start, end - start);
    if (part == ".." || part == ".") return false;
    start = end + 1;
  }
  return true;
}

bool IsFolder(const ArchiveRecord& record) {
  return !record.name.empty() && record.name.back() == '/';
}

class ZipFileImpl final : public ZipFile {
 public:
  ~ZipFileImpl() override {
    if (zip_ != nullptr) zip_discard(zip_);
  }

  Status Initialize(const std::string& path);
  StatusOr<RecordData> Read(const ArchiveRecord& record) const override;

 private:
  Status Map();
  Status OpenZip();
  Status CheckDirectory(const std::vector<zip::Entry>& entries);
  Status CheckRecords(const std::vector<zip::Entry>& entries);
  Status CheckRecord(const zip::Entry& entry, uint64_t index);

  zip_t* zip_ = nullptr;
  mutable Mutex zip_mu_;  // libzip archives are not thread-safe
};

Status ZipFileImpl::Map() {
  UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoError("open " + path_, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + path_, errno);
  if (!S_ISREG(st.st_mode)) return Refused(path_, "not a regular file");
  if (st.st_size == 0) return Refused(path_, "not a zip archive (empty file)");
  size_ = static_cast<size_t>(st.st_size);
  // Private and writable: tensors made from stored records may be written in
  // place; the first write to a page copies it for this process, and the file
  // is never changed.
  void* map = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), 0);
  if (map == MAP_FAILED) return ErrnoError("mmap " + path_, errno);
  base_ = static_cast<const uint8_t*>(map);
  size_t size = size_;
  mapping_ = std::shared_ptr<const void>(
      map, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  return OkStatus();
}

Status ZipFileImpl::OpenZip() {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(base_, size_, 0, &error);
  if (source != nullptr) zip_ = zip_open_from_source(source, ZIP_CHECKCONS | ZIP_RDONLY, &error);
  if (zip_ == nullptr) {
    if (source != nullptr) zip_source_free(source);
    int code = zip_error_code_zip(&error);
    std::string what = zip_error_strerror(&error);
    zip_error_fini(&error);
    if (code == ZIP_ER_NOZIP) return Refused(path_, "not a zip archive");
    if (code == ZIP_ER_INCONS || code == ZIP_ER_EOF) {
      return Corrupt(path_, "inconsistent zip structure (" + what + ")");
    }
    return Corrupt(path_, "unreadable zip archive (" + what + ")");
  }
  zip_error_fini(&error);
  return OkStatus();
}

// Checks that need only the directory, made before libzip sees the archive.
Status ZipFileImpl::CheckDirectory(const std::vector<zip::Entry>& entries) {
  if (entries.size() > fmt::kMaxEntries) return Refused(path_, "too many records");
  if (entries.empty()) return Refused(path_, "empty archive");
  std::set<std::string> names;
  for (const zip::Entry& entry : entries) {
    const std::string shown = entry.name.substr(0, entry.name.find('\0'));
    if (!SafeName(entry.name)) return Refused(path_, "unsafe record name \"" + shown + "\"");
    if (!names.insert(entry.name).second) return Refused(path_, "duplicate record " + shown);
    if (entry.flags & zip::kFlagEncrypted) return Refused(path_, "encrypted record " + shown);
    if (entry.method != zip::kMethodStored && entry.method != zip::kMethodDeflated) {
      return Refused(path_, "unsupported compression method " + std::to_string(entry.method) +
                                " for " + shown);
    }
    if (entry.method == zip::kMethodStored && entry.compressed_size != entry.size) {
      return Corrupt(path_, "size mismatch: stored record " + shown + " declares " +
                                std::to_string(entry.size) + " bytes but holds " +
                                std::to_string(entry.compressed_size));
    }
    if (entry.size > fmt::kCompressionRatioFloorBytes &&
        entry.size / std::max<uint64_t>(entry.compressed_size, 1) >
            static_cast<uint64_t>(fmt::kMaxCompressionRatio)) {
      return Refused(path_, "compression ratio of " + shown + " exceeds " +
                                std::to_string(fmt::kMaxCompressionRatio) + ":1 (zip bomb?)");
    }
  }
  return OkStatus();
}

Status ZipFileImpl::CheckRecord(const zip::Entry& entry, uint64_t index) {
  const std::string& shown = entry.name;
  zip_stat_t stat;
  zip_stat_init(&stat);
  const char* name = zip_get_name(zip_, index, ZIP_FL_ENC_RAW);
  if (name == nullptr || shown != name ||
      zip_stat_index(zip_, index, ZIP_FL_UNCHANGED, &stat) != 0) {
    return Corrupt(path_, "inconsistent directory entry " + shown);
  }
  if ((stat.valid & ZIP_STAT_ENCRYPTION_METHOD) && stat.encryption_method != ZIP_EM_NONE) {
    return Refused(path_, "encrypted record " + shown);
  }
  if (stat.size != entry.size || stat.comp_size != entry.compressed_size ||
      stat.crc != entry.crc32) {
    return Corrupt(path_, "size mismatch for " + shown + " between directory and libzip");
  }
  return OkStatus();
}

Status ZipFileImpl::CheckRecords(const std::vector<zip::Entry>& entries) {
  if (static_cast<uint64_t>(zip_get_num_entries(zip_, 0)) != entries.size()) {
    return Corrupt(path_, "inconsistent zip structure (record count)");
  }
  uint64_t total = 0;
  for (uint64_t i = 0; i < entries.size(); ++i) {
    const zip::Entry& entry = entries[i];
    CHORUS_RETURN_IF_ERROR(CheckRecord(entry, i));
    total += entry.size;
    if (total > fmt::kMaxTotalUncompressedBytes) {
      return Refused(path_, "uncompressed size exceeds the limit (zip bomb?)");
    }
    ArchiveRecord record;
    record.name = entry.name;
    record.size = entry.size;
    record.compressed_size = entry.compressed_size;
    record.data_offset = entry.data_offset;
    record.crc32 = entry.crc32;
    record.stored = entry.method == zip::kMethodStored;
    index_[record.name] = records_.size();
    records_.push_back(std::move(record));
  }
  return OkStatus();
}

Status ZipFileImpl::Initialize(const std::string& path) {
  path_ = path;
  CHORUS_RETURN_IF_ERROR(Map());
  StatusOr<std::vector<zip::Entry>> entries = zip::ReadDirectory(base_, size_);
  if (!entries.ok()) return Refused(path_, entries.status().message());
  CHORUS_RETURN_IF_ERROR(CheckDirectory(*entries));
  CHORUS_RETURN_IF_ERROR(OpenZip());
  return CheckRecords(*entries);
}

StatusOr<RecordData> ZipFileImpl::Read(const ArchiveRecord& record) const {
  if (record.stored) return RecordData{base_ + record.data_offset, record.size, mapping_};
  auto buffer = std::make_shared<std::vector<uint8_t>>(record.size);
  MutexLock lock(&zip_mu_);
  zip_file_t* file = zip_fopen(zip_, record.name.c_str(), ZIP_FL_ENC_RAW);
  if (file == nullptr) return Corrupt(path_, "cannot open record " + record.name);
  zip_int64_t got = zip_fread(file, buffer->data(), record.size);
  // One more read reaches the end, where libzip compares the CRC.
  uint8_t extra;
  zip_int64_t tail = got == static_cast<zip_int64_t>(record.size) ? zip_fread(file, &extra, 1) : 0;
  int code = zip_error_code_zip(zip_file_get_error(file));
  zip_fclose(file);
  if (code == ZIP_ER_CRC) return Corrupt(path_, "bad CRC for record " + record.name);
  if (got != static_cast<zip_int64_t>(record.size) || tail != 0) {
    return Corrupt(path_, "size mismatch: record " + record.name + " does not hold its " +
                              std::to_string(record.size) + " declared bytes");
  }
  auto* data = buffer->data();
  return RecordData{data, record.size, std::shared_ptr<const void>(buffer, data)};
}

// Writes `data` to the new file `path`, never through a link.
Status WriteNewFile(const std::string& path, const RecordData& data) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) return ErrnoError("create " + path, errno);
  size_t written = 0;
  while (written < data.size) {
    ssize_t n = ::write(fd.get(), data.data + written, data.size - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("write " + path, errno);
    written += static_cast<size_t>(n);
  }
  return OkStatus();
}

Status ExtractRecords(const ZipFile& zip, const std::filesystem::path& root) {
  for (const ArchiveRecord& record : zip.records()) {
    const std::filesystem::path target = root / record.name;  // SafeName: stays under root
    std::error_code error;
    std::filesystem::create_directories(IsFolder(record) ? target : target.parent_path(), error);
    if (error) return ErrnoError("create folder for " + target.string(), error.value());
    if (IsFolder(record)) continue;
    if (record.stored) CHORUS_RETURN_IF_ERROR(zip.VerifyCrc(record));  // Read checks the others
    CHORUS_ASSIGN_OR_RETURN(RecordData data, zip.Read(record));
    CHORUS_RETURN_IF_ERROR(WriteNewFile(target.string(), data));
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::shared_ptr<const ZipFile>> ZipFile::Open(const std::string& path) {
  auto zip = std::make_shared<ZipFileImpl>();
  CHORUS_RETURN_IF_ERROR(zip->Initialize(path));
  return std::shared_ptr<const ZipFile>(std::move(zip));
}

const ArchiveRecord* ZipFile::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &records_[it->second];
}

Status ZipFile::VerifyCrc(const ArchiveRecord& record) const {
  if (!record.stored) return Read(record).status();  // libzip checks the CRC
  uLong crc = crc32_z(0L, Z_NULL, 0);
  crc = crc32_z(crc, base_ + record.data_offset, record.size);
  if (crc != record.crc32) return Corrupt(path_, "bad CRC for record " + record.name);
  return OkStatus();
}

Status ZipFile::ExtractTo(const std::string& folder) const {
  std::error_code error;
  if (!std::filesystem::create_directory(folder, error)) {
    if (error) return ErrnoError("create " + folder, error.value());
    if (!std::filesystem::is_empty(folder, error) || error) {
      return AlreadyExistsError(folder + " is not empty: extracting " + path_ +
                                " needs an empty folder");
    }
  }
  Status extracted = ExtractRecords(*this, folder);
  if (!extracted.ok()) std::filesystem::remove_all(folder, error);
  return extracted;
}

}  // namespace chorus

#include "chorus/package/archive.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <mutex>
#include <set>

#include "chorus/common/file_util.h"
#include "chorus/common/thread_annotations.h"
#include "chorus/package/format.h"
#include "package/src/digest.h"
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

bool StartsWith(const std::string& name, const char* prefix) { return name.rfind(prefix, 0) == 0; }

// Weights: torch.package storages, an exported program's weights and an
// AOTInductor package's compiled model (which holds its weights).
bool IsStorage(const std::string& name) {
  const std::string suffix = fmt::kStorageSuffix;
  return (StartsWith(name, fmt::kStorageDirectory) && name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) ||
         StartsWith(name, fmt::kExportWeightsDirectory) ||
         StartsWith(name, fmt::kAotInductorDirectory);
}

class ArchiveImpl final : public Archive {
 public:
  ~ArchiveImpl() override {
    if (zip_ != nullptr) zip_discard(zip_);
  }

  Status Initialize(const std::string& path, const ArchiveOptions& options);
  StatusOr<RecordData> ReadRecord(const ArchiveRecord& record) const;

 private:
  Status Map();
  Status OpenZip();
  Status CheckDirectory(const std::vector<zip::Entry>& entries);
  Status CheckRecords(const std::vector<zip::Entry>& entries);
  Status CheckRecord(const zip::Entry& entry, uint64_t index);
  Status DetectFormat();
  bool HasRecordUnder(const char* directory) const;
  Status VerifyCrcs(bool storages);

  zip_t* zip_ = nullptr;
  mutable Mutex zip_mu_;  // libzip archives are not thread-safe
};

Status ArchiveImpl::Map() {
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

Status ArchiveImpl::OpenZip() {
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
Status ArchiveImpl::CheckDirectory(const std::vector<zip::Entry>& entries) {
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

Status ArchiveImpl::CheckRecord(const zip::Entry& entry, uint64_t index) {
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

Status ArchiveImpl::CheckRecords(const std::vector<zip::Entry>& entries) {
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
  }
  // torch writes every record under one top folder; records are named
  // relative to it, as torch's own reader does.
  prefix_ = entries.front().name.substr(0, entries.front().name.find('/') + 1);
  if (prefix_.empty()) return Refused(path_, "records are not under one top folder");
  for (const zip::Entry& entry : entries) {
    if (entry.name.compare(0, prefix_.size(), prefix_) != 0) {
      return Refused(path_, "records are not under one top folder (" + entry.name + ")");
    }
    ArchiveRecord record;
    record.name = entry.name.substr(prefix_.size());
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

Status ArchiveImpl::DetectFormat() {
  if (Find(fmt::kTorchPackageVersionRecord) && Find(fmt::kExternModulesRecord)) {
    format_ = ModelFormat::kTorchPackage;
  } else if (Find(fmt::kTorchScriptDataRecord) && Find(fmt::kTorchScriptConstantsRecord)) {
    format_ = ModelFormat::kTorchScript;
  } else if (Find(fmt::kPt2ArchiveFormatRecord) && HasRecordUnder(fmt::kAotInductorDirectory)) {
    format_ = ModelFormat::kAotInductor;
  } else if (Find(fmt::kPt2ArchiveFormatRecord) && HasRecordUnder(fmt::kExportModelsDirectory)) {
    format_ = ModelFormat::kTorchExport;
  } else {
    return Refused(path_, "not a torch.package, TorchScript, torch.export or AOTInductor archive");
  }
  return OkStatus();
}

bool ArchiveImpl::HasRecordUnder(const char* directory) const {
  for (const ArchiveRecord& record : records_) {
    if (StartsWith(record.name, directory)) return true;
  }
  return false;
}

Status ArchiveImpl::VerifyCrcs(bool storages) {
  for (const ArchiveRecord& record : records_) {
    if (!storages && IsStorage(record.name)) continue;
    if (record.stored) {
      uLong crc = crc32_z(0L, Z_NULL, 0);
      crc = crc32_z(crc, base_ + record.data_offset, record.size);
      if (crc != record.crc32) return Corrupt(path_, "bad CRC for record " + record.name);
    } else {
      StatusOr<RecordData> data = ReadRecord(record);  // libzip checks the CRC
      if (!data.ok()) return data.status();
    }
  }
  return OkStatus();
}

Status ArchiveImpl::Initialize(const std::string& path, const ArchiveOptions& options) {
  path_ = path;
  CHORUS_RETURN_IF_ERROR(Map());
  StatusOr<std::vector<zip::Entry>> entries = zip::ReadDirectory(base_, size_);
  if (!entries.ok()) return Refused(path_, entries.status().message());
  CHORUS_RETURN_IF_ERROR(CheckDirectory(*entries));
  CHORUS_RETURN_IF_ERROR(OpenZip());
  CHORUS_RETURN_IF_ERROR(CheckRecords(*entries));
  CHORUS_RETURN_IF_ERROR(DetectFormat());
  CHORUS_RETURN_IF_ERROR(VerifyCrcs(options.verify_storage_crc));
  if (const ArchiveRecord* record = Find(fmt::kManifestRecord)) {
    CHORUS_ASSIGN_OR_RETURN(RecordData text, ReadRecord(*record));
    StatusOr<Manifest> manifest =
        ParseManifest(std::string_view(reinterpret_cast<const char*>(text.data), text.size));
    if (!manifest.ok()) return Refused(path_, manifest.status().message());
    manifest_ = std::move(*manifest);
    if (format_ == ModelFormat::kTorchPackage) format_ = ModelFormat::kChorus;
  }
  if (options.verify_sha256) CHORUS_RETURN_IF_ERROR(VerifySha256());
  return OkStatus();
}

StatusOr<RecordData> ArchiveImpl::ReadRecord(const ArchiveRecord& record) const {
  if (record.stored) return RecordData{base_ + record.data_offset, record.size, mapping_};
  auto buffer = std::make_shared<std::vector<uint8_t>>(record.size);
  MutexLock lock(&zip_mu_);
  zip_file_t* file = zip_fopen(zip_, (prefix_ + record.name).c_str(), ZIP_FL_ENC_RAW);
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

}  // namespace

StatusOr<std::shared_ptr<Archive>> Archive::Open(const std::string& path,
                                                 const ArchiveOptions& options) {
  auto archive = std::make_shared<ArchiveImpl>();
  CHORUS_RETURN_IF_ERROR(archive->Initialize(path, options));
  return std::shared_ptr<Archive>(std::move(archive));
}

const ArchiveRecord* Archive::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &records_[it->second];
}

StatusOr<RecordData> Archive::Read(std::string_view name) const {
  const ArchiveRecord* record = Find(name);
  if (record == nullptr) return NotFoundError("no record " + std::string(name) + " in " + path_);
  return static_cast<const ArchiveImpl*>(this)->ReadRecord(*record);
}

Status Archive::VerifySha256() const {
  if (!manifest_) return FailedPreconditionError(path_ + " has no manifest to verify against");
  for (const auto& [name, expected] : manifest_->files) {
    StatusOr<RecordData> data = Read(name);
    if (!data.ok()) return DataLossError("sha256 mismatch: record " + name + " is missing");
    if (data->size != expected.size ||
        digest::Sha256Hex(data->data, data->size) != expected.sha256) {
      return DataLossError("sha256 mismatch for record " + name + " in " + path_);
    }
  }
  return OkStatus();
}

}  // namespace chorus

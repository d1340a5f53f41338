#include "chorus/package/archive.h"

#include <string>

#include "chorus/package/format.h"
#include "chorus/package/zip_file.h"
#include "package/src/digest.h"

namespace chorus {
namespace {

namespace fmt = package_format;

Status Refused(const std::string& path, const std::string& what) {
  return InvalidArgumentError(what + " in " + path);
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

// An Archive is a ZipFile (which validates the zip) whose records sit under
// one top folder, as torch writes them.
class ArchiveImpl final : public Archive {
 public:
  Status Initialize(const std::string& path, const ArchiveOptions& options);
  StatusOr<RecordData> ReadRecord(const ArchiveRecord& record) const;

 private:
  Status TakeRecords();
  Status DetectFormat();
  bool HasRecordUnder(const char* directory) const;
  Status VerifyCrcs(bool storages);
  // The zip's own record of `record` (one of records_, named under prefix_).
  const ArchiveRecord& InZip(const ArchiveRecord& record) const;

  std::shared_ptr<const ZipFile> zip_;
};

Status ArchiveImpl::TakeRecords() {
  const std::vector<ArchiveRecord>& entries = zip_->records();
  // torch writes every record under one top folder; records are named
  // relative to it, as torch's own reader does.
  prefix_ = entries.front().name.substr(0, entries.front().name.find('/') + 1);
  if (prefix_.empty()) return Refused(path_, "records are not under one top folder");
  for (const ArchiveRecord& entry : entries) {
    if (entry.name.compare(0, prefix_.size(), prefix_) != 0) {
      return Refused(path_, "records are not under one top folder (" + entry.name + ")");
    }
    ArchiveRecord record = entry;
    record.name = entry.name.substr(prefix_.size());
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

const ArchiveRecord& ArchiveImpl::InZip(const ArchiveRecord& record) const {
  return *zip_->Find(prefix_ + record.name);  // TakeRecords made every name from the zip's
}

Status ArchiveImpl::VerifyCrcs(bool storages) {
  for (const ArchiveRecord& record : records_) {
    if (!storages && IsStorage(record.name)) continue;
    CHORUS_RETURN_IF_ERROR(zip_->VerifyCrc(InZip(record)));
  }
  return OkStatus();
}

Status ArchiveImpl::Initialize(const std::string& path, const ArchiveOptions& options) {
  path_ = path;
  CHORUS_ASSIGN_OR_RETURN(zip_, ZipFile::Open(path));
  base_ = zip_->mapped_data();
  size_ = zip_->mapped_size();
  mapping_ = zip_->mapping();
  CHORUS_RETURN_IF_ERROR(TakeRecords());
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
  return zip_->Read(InZip(record));
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

// Constants of the chorus package format (docs/package-format.md), shared by
// the reader (C++, this library) and the writer (the chorus-package tool,
// whose chorus/package/_format.py is generated from this file at build time:
// keep every constant on one line, `inline constexpr <type> kName = <value>;`).
#ifndef CHORUS_PACKAGE_FORMAT_H_
#define CHORUS_PACKAGE_FORMAT_H_

#include <cstdint>

namespace chorus::package_format {

// The manifest chorus adds to a torch.package archive (relative to the
// archive's top folder). torch.package's importer ignores everything in .data/.
inline constexpr char kManifestRecord[] = ".data/chorus/manifest.json";
// Example inputs and the outputs the model gave for them when it was packaged
// (torch.save format), used by `chorus-package check`.
inline constexpr char kExampleInputsRecord[] = ".data/chorus/example_inputs.pt";
inline constexpr char kExampleOutputsRecord[] = ".data/chorus/example_outputs.pt";
// torch.package's own bookkeeping records.
inline constexpr char kTorchPackageVersionRecord[] = ".data/version";
inline constexpr char kExternModulesRecord[] = ".data/extern_modules";
inline constexpr char kStorageDirectory[] = ".data/";
inline constexpr char kStorageSuffix[] = ".storage";
// TorchScript archives (torch.jit.save) have these instead.
inline constexpr char kTorchScriptDataRecord[] = "data.pkl";
inline constexpr char kTorchScriptConstantsRecord[] = "constants.pkl";
// PT2 archives (torch.export.save, and AOTInductor packages made by
// torch._inductor.aoti_compile_and_package) say so in this record.
inline constexpr char kPt2ArchiveFormatRecord[] = "archive_format";
inline constexpr char kPt2ArchiveFormat[] = "pt2";
// An exported program's graph is under models/; an AOTInductor package's
// compiled model is under data/aotinductor/<model name>/.
inline constexpr char kExportModelsDirectory[] = "models/";
inline constexpr char kAotInductorDirectory[] = "data/aotinductor/";
// An exported program's weights: raw tensor bytes, described by this record.
inline constexpr char kExportWeightsDirectory[] = "data/weights/";
inline constexpr char kExportWeightsConfigRecord[] = "data/weights/model_weights_config.json";
// The AOTInductor package metadata key (aot_inductor.metadata at compile time)
// that carries the model's signature, as {"inputs", "outputs", "batching"}
// in the manifest's form.
inline constexpr char kAotInductorSignatureKey[] = "chorus.signature";

// What each kind of archive is called in messages (model_format.h, and
// the packaging tool's).
inline constexpr char kKindTorchPackage[] = "torch.package archive";
inline constexpr char kKindTorchScript[] = "TorchScript file";
inline constexpr char kKindTorchExport[] = "torch.export program";
inline constexpr char kKindAotInductor[] = "AOTInductor package";

// Manifest schema.
inline constexpr char kFormatName[] = "chorus-package";
inline constexpr int kFormatVersion = 1;
inline constexpr char kEntryPointPickle[] = "pickle";
inline constexpr char kEntryPointFactory[] = "factory";
// Not in manifests: how the host asks an interpreter for a torch.export program.
inline constexpr char kEntryPointExport[] = "export";
// Where chorus-package puts the pickled model object (package, resource). A
// package name of its own: "model" would collide with a user module model.py.
inline constexpr char kModelPicklePackage[] = "chorus_model";
inline constexpr char kModelPickleResource[] = "model.pkl";

// Signatures (chorus-package sign): one record per signing key, named
// <key id>.json, holding an Ed25519 signature of the manifest's SHA-256
// (docs/package-format.md, "Signed archives").
inline constexpr char kSignatureDirectory[] = ".data/chorus/signatures/";
inline constexpr char kSignatureFormatName[] = "chorus-signature";
inline constexpr int kSignatureFormatVersion = 1;
inline constexpr char kSignatureAlgorithm[] = "ed25519";
// What is signed: this prefix, then the manifest record's SHA-256 in hex.
inline constexpr char kSignedMessagePrefix[] = "chorus-package-signature-v1:";
// Hex digits of a public key's SHA-256 that name it (its key id).
inline constexpr int kKeyIdHexDigits = 16;

// Safety limits applied when opening an archive.
inline constexpr uint64_t kMaxEntries = 1000000;
inline constexpr uint64_t kMaxTotalUncompressedBytes = 1099511627776;  // 1 TiB
inline constexpr int kMaxCompressionRatio = 100;
// Entries smaller than this are exempt from the ratio check (tiny text files
// compress very well without being bombs).
inline constexpr uint64_t kCompressionRatioFloorBytes = 1048576;
// torch.package (PyTorchFileWriter) aligns record data to this many bytes.
inline constexpr int kRecordAlignment = 64;

}  // namespace chorus::package_format

#endif  // CHORUS_PACKAGE_FORMAT_H_

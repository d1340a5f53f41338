// TorchServe's MAR-INF/MANIFEST.json (torch-model-archiver's manifest of a
// .mar archive), read as TorchServe 0.12 reads it: the model's name, version,
// files and handler. Keys TorchServe ignores (legacy modelServerVersion,
// implementationVersion, specificationVersion; createdOn, archiverVersion,
// extensions) are ignored here too; what chorus cannot serve (the C++ "LSP"
// runtime) is refused naming it.
//
// Thread-compatible functions of their arguments; no I/O.
#ifndef CHORUS_SERVER_CONFIG_TORCHSERVE_MANIFEST_H_
#define CHORUS_SERVER_CONFIG_TORCHSERVE_MANIFEST_H_

#include <string>
#include <string_view>

#include "chorus/common/status.h"

namespace chorus {

// The code a manifest's "handler" names (ts/model_loader.py's reading of it).
// "handler.py", "handler", "dir/handler.py:fn" and "handler:fn" name a module
// of the archive ("handler") and optionally the function in it to call; a
// bare name no archive module has ("image_classifier") is one of TorchServe's
// default handlers, which only the import can tell (the module is tried in
// the archive first, then in ts.torch_handler, as TorchServe does).
struct TorchServeHandler {
  std::string module;    // the module name: no ".py", no folders
  std::string function;  // "" when none is named: `handle`, else the module's one class
};

// The manifest's values ("" where a key is absent).
struct TorchServeManifest {
  std::string model_name;             // "": the archive's file name gives it
  std::string model_version = "1.0";  // TorchServe's default
  std::string runtime = "python";     // "python" or "python3"
  std::string handler_text;           // as written, for messages and context.manifest
  TorchServeHandler handler;
  std::string serialized_file;    // file names inside the archive (basenames)
  std::string model_file;         // the eager model's nn.Module definition
  std::string requirements_file;  // pip requirements (see docs/torchserve.md)
  std::string config_file;        // model-config.yaml
  std::string envelope;           // request envelope: body, json, kserve, kservev2
  std::string description;
};

// The manifest in `text`. INVALID_ARGUMENT "MANIFEST.json: <what>" for text
// that is not a JSON object, "MANIFEST.json: <key>: <why>" for a value of the
// wrong type, a model name TorchServe would refuse, a runtime chorus does not
// serve, a handler that names no module.
StatusOr<TorchServeManifest> ParseTorchServeManifest(std::string_view text);

// The handler a manifest's "handler" names; INVALID_ARGUMENT for one that
// names no module ("", ":fn", "dir/").
StatusOr<TorchServeHandler> ParseTorchServeHandler(std::string_view text);

// TorchServe's rule for model names: ^[A-Za-z0-9][A-Za-z0-9_\-.]*$.
bool IsTorchServeModelName(std::string_view name);

}  // namespace chorus

#endif  // CHORUS_SERVER_CONFIG_TORCHSERVE_MANIFEST_H_

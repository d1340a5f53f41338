// AOTInductor packages (.pt2 from torch._inductor.aoti_compile_and_package)
// as chorus::Model: compiled C++ run by libtorch, no interpreter. Internal to
// chorus_model; users reach it through Model::Load.
#ifndef CHORUS_PACKAGE_MODEL_AOT_INDUCTOR_MODEL_H_
#define CHORUS_PACKAGE_MODEL_AOT_INDUCTOR_MODEL_H_

#include <cstddef>
#include <memory>
#include <optional>

#include "chorus/common/status.h"
#include "chorus/package/archive.h"
#include "chorus/package/manifest.h"
#include "chorus/package/model.h"

namespace chorus::internal {

// Loads the package's model with `instances` copies of its runtime state
// (calls beyond that wait). The signature is the package's metadata
// (package_format::kAotInductorSignatureKey), else `signature`; neither is
// FAILED_PRECONDITION. A package torch cannot load is INVALID_ARGUMENT.
StatusOr<std::shared_ptr<Model>> LoadAotInductorModel(std::shared_ptr<Archive> archive,
                                                      const std::optional<Manifest>& signature,
                                                      size_t instances);

}  // namespace chorus::internal

#endif  // CHORUS_PACKAGE_MODEL_AOT_INDUCTOR_MODEL_H_

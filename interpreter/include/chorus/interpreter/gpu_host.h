// Whether this host can run torch's GPU code, and which libraries are only
// for it. torch's CUDA wheels load the CUDA libraries into every process, GPU
// or not: on a CPU host, chorus keeps the Python packages that only drive a
// GPU out of its interpreters and gives back the pages loading those
// libraries touched.
#ifndef CHORUS_INTERPRETER_GPU_HOST_H_
#define CHORUS_INTERPRETER_GPU_HOST_H_

#include <string_view>

namespace chorus {

// Whether libtorch sees a CUDA or ROCm device. Asks libtorch once (the first
// call initializes its CUDA hooks), then remembers. Any thread.
bool HostHasGpu();

// Whether the library at `path` only serves GPU code: the files of NVIDIA's
// CUDA wheels (site-packages/nvidia/...), torch's CUDA and ROCm parts
// (libtorch_cuda*, libc10_cuda, libcaffe2_nvrtc, ...hip), and a CUDA or ROCm
// installation's libraries. Any thread.
bool IsGpuOnlyLibrary(std::string_view path);

}  // namespace chorus

#endif  // CHORUS_INTERPRETER_GPU_HOST_H_

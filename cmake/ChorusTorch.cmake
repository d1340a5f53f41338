# Finds the torch that CHORUS_PYTHON (cmake/ChorusPython.cmake) imports, a pip
# wheel in chorus' venv or any other installed torch, and adapts the build to it.
execute_process(
  COMMAND "${CHORUS_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
  OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
  RESULT_VARIABLE _torch_prefix_result)
if(_torch_prefix_result EQUAL 0)
  list(PREPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
endif()
# A CUDA build's TorchConfig looks for a CUDA toolkit at configure time.
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
# Protobuf first: torch 2.x's config defines a dummy protobuf::libprotobuf
# target when none exists, and chorus' gRPC code would then link no protobuf.
find_package(Protobuf REQUIRED)
find_package(Torch REQUIRED)

# torch 2.10 and later need C++20 in every file that includes their headers.
if(Torch_VERSION VERSION_GREATER_EQUAL 2.10)
  set(CMAKE_CXX_STANDARD 20)
endif()

# The wheel ships headers of libraries chorus takes from Debian: fmt (a newer
# major version; spdlog needs Debian's) and protobuf (google/; the generated
# gRPC code needs Debian's). A plain -I directory is searched before the
# -isystem directories of imported targets, so this one decides which is seen.
set(_system_include "${PROJECT_BINARY_DIR}/system-include")
foreach(_name IN ITEMS fmt google)
  if(EXISTS "${TORCH_INSTALL_PREFIX}/include/${_name}" AND EXISTS "/usr/include/${_name}")
    file(MAKE_DIRECTORY "${_system_include}")
    file(CREATE_LINK "/usr/include/${_name}" "${_system_include}/${_name}" SYMBOLIC)
    include_directories(BEFORE "${_system_include}")
  endif()
endforeach()

# A pip wheel's libraries find the nvidia-* wheels' libraries through their own
# RPATH ($ORIGIN/../../nvidia/*/lib); the linker must look there too, or it
# checks them against the CUDA toolkit's older copies.
get_filename_component(_torch_site "${TORCH_INSTALL_PREFIX}/.." ABSOLUTE)
file(GLOB _nvidia_lib_dirs LIST_DIRECTORIES true "${_torch_site}/nvidia/*/lib")
foreach(_dir IN LISTS _nvidia_lib_dirs)
  add_link_options("LINKER:-rpath-link,${_dir}")
endforeach()

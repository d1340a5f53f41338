# chorus_public_headers(target): the component's public headers, include/chorus/...
# beside its CMakeLists.txt, for its users in the build tree and once installed;
# and the repository root for its own private includes ("training/collectives/src/...").
function(chorus_public_headers target)
  target_include_directories(${target}
    PUBLIC
      $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE "${PROJECT_SOURCE_DIR}")
endfunction()

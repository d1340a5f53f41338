# cmake --install: headers, libraries, tools, chorus' Python package and a
# CMake package config, so host applications can `find_package(chorus)`.
include(CMakePackageConfigHelpers)

install(TARGETS chorus_common chorus_interpreter chorus_pyside chorus_package chorus_model
  EXPORT chorusTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
foreach(dir common/include interpreter/include package/include package/model/include)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${dir}/chorus" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
endforeach()

install(EXPORT chorusTargets NAMESPACE chorus:: DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/chorus")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/chorusConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/chorusConfig.cmake"
  INSTALL_DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/chorus")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/chorusConfig.cmake"
              "${PROJECT_BINARY_DIR}/chorusConfigVersion.cmake"
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/chorus")

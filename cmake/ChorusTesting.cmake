# chorus_add_test(NAME name SOURCES ... LIBS ... [LABELS ...])
# A GoogleTest binary in bin/tests, registered with CTest test by test.
function(chorus_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gmock GTest::gtest GTest::gtest_main)
  # Tests may use private headers and tests/support/ (paths from the root).
  target_include_directories(${T_NAME} PRIVATE "${PROJECT_SOURCE_DIR}")
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/bin/tests")
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  # Listing a binary's tests loads libtorch (its static initializers register
  # every operator): seconds on a loaded machine with a cold page cache, so
  # the 5 s default is far too tight for CI.
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 120
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    WORKING_DIRECTORY "${PROJECT_BINARY_DIR}")
endfunction()

# Facts about the Python that chorus embeds. CHORUS_PYTHON pins it (the Makefile
# passes PYTHON, by default the venv `make deps` makes); everything else is
# asked of that Python, including where its torch is (cmake/ChorusTorch.cmake).
set(CHORUS_PYTHON "" CACHE FILEPATH "Python that imports torch; chorus embeds it")
if(NOT CHORUS_PYTHON)
  message(FATAL_ERROR "CHORUS_PYTHON is not set. `make deps` creates a venv with the pinned "
    "torch; or pass -DCHORUS_PYTHON=/path/to/venv/bin/python (a venv of Debian's "
    "/usr/bin/python3 with torch installed).")
endif()

execute_process(
  COMMAND "${CHORUS_PYTHON}" "${PROJECT_SOURCE_DIR}/tools/python_facts.py"
  OUTPUT_VARIABLE _facts
  ERROR_VARIABLE _facts_error
  RESULT_VARIABLE _facts_result)
if(NOT _facts_result EQUAL 0)
  message(FATAL_ERROR "${CHORUS_PYTHON} cannot describe itself (does it import torch?):\n${_facts_error}")
endif()
string(REPLACE "\n" ";" _facts "${_facts}")
foreach(_line IN LISTS _facts)
  if(_line MATCHES "^([A-Z_]+)=(.*)$")
    set(CHORUS_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
  endif()
endforeach()
set(CHORUS_LIBPYTHON "${CHORUS_PY_LIBPYTHON}")
message(STATUS "chorus embeds Python ${CHORUS_PY_VERSION} (${CHORUS_PYTHON}), torch ${CHORUS_TORCH_VERSION}")

# chorus' Python package (python/) goes to share/chorus/python (build tree and
# install tree alike), one symlink per file in the build tree so that edits
# need no rebuild.
set(CHORUS_PYTHON_BUILD_DIR "${PROJECT_BINARY_DIR}/share/chorus/python")
if(IS_SYMLINK "${CHORUS_PYTHON_BUILD_DIR}")
  file(REMOVE "${CHORUS_PYTHON_BUILD_DIR}")  # older build trees linked the whole folder
endif()
file(MAKE_DIRECTORY "${CHORUS_PYTHON_BUILD_DIR}")

function(chorus_add_python_sources root)
  file(GLOB_RECURSE files RELATIVE "${root}" CONFIGURE_DEPENDS "${root}/chorus/*.py")
  foreach(file IN LISTS files)
    get_filename_component(dir "${CHORUS_PYTHON_BUILD_DIR}/${file}" DIRECTORY)
    file(MAKE_DIRECTORY "${dir}")
    file(CREATE_LINK "${root}/${file}" "${CHORUS_PYTHON_BUILD_DIR}/${file}" SYMBOLIC)
  endforeach()
  install(DIRECTORY "${root}/chorus" DESTINATION "${CMAKE_INSTALL_DATADIR}/chorus/python"
          FILES_MATCHING PATTERN "*.py")
endfunction()

# chorus_generate_python_constants(HEADER OUTPUT_RELATIVE_PATH): the header's
# `inline constexpr` constants as a Python module (python/build_support.py).
function(chorus_generate_python_constants header output)
  set(out "${CHORUS_PYTHON_BUILD_DIR}/${output}")
  execute_process(COMMAND "${CHORUS_PYTHON}" "${PROJECT_SOURCE_DIR}/python/build_support.py"
                          constants "${header}" "${out}"
                  COMMAND_ERROR_IS_FATAL ANY)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${header}")
  get_filename_component(dir "${output}" DIRECTORY)
  install(FILES "${out}" DESTINATION "${CMAKE_INSTALL_DATADIR}/chorus/python/${dir}")
endfunction()

# cmake -DHEADER=... -DOUTPUT=... -P GeneratePythonConstants.cmake
# Turns `inline constexpr <type> kSomeName = <value>;` lines of a C++ header
# into `SOME_NAME = <value>` lines of a Python module.
file(STRINGS "${HEADER}" lines REGEX "^inline constexpr ")
set(out "\"\"\"Generated from ${HEADER}: do not edit.\"\"\"\n\n")
foreach(line IN LISTS lines)
  if(line MATCHES "^inline constexpr [a-z_0-9:]+ k([A-Za-z0-9]+)(\\[\\])? = (.*);")
    set(camel "${CMAKE_MATCH_1}")
    set(value "${CMAKE_MATCH_3}")
    string(REGEX REPLACE "([a-z0-9])([A-Z])" "\\1_\\2" snake "${camel}")
    string(TOUPPER "${snake}" name)
    string(APPEND out "${name} = ${value}\n")
  endif()
endforeach()
file(WRITE "${OUTPUT}.tmp" "${out}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")

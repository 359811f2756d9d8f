# Run with cmake -P (CTest test cmake:werror_only_in_ci_presets): a plain configure of the source tree, and the
# `default` preset a user builds, leave REPRISE_WERROR off (a user's compiler or build type may warn where CI's
# do not, and must still build); CI's presets, `ci` and `asan`, turn it on. Each configure has the tests, tools,
# examples, benchmarks and CUDA off: only the option's value is checked.
# Arguments: -DSOURCE_DIR=<repository> -DBINARY_DIR=<scratch directory>
foreach(v SOURCE_DIR BINARY_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "werror_default.cmake: pass -D${v}=...")
  endif()
endforeach()

# configure_into(<name> <expected ON|OFF> [arguments...]): configures into BINARY_DIR/<name> and checks the
# cached REPRISE_WERROR.
function(configure_into name expected)
  set(dir "${BINARY_DIR}/${name}")
  file(REMOVE_RECURSE "${dir}")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" ${ARGN} -B "${dir}" -DREPRISE_BUILD_TESTS=OFF -DREPRISE_BUILD_TOOLS=OFF
            -DREPRISE_BUILD_EXAMPLES=OFF -DREPRISE_BUILD_BENCHMARKS=OFF -DREPRISE_ENABLE_CUDA=OFF
    WORKING_DIRECTORY "${SOURCE_DIR}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure failed:\n${out}\n${err}")
  endif()
  file(STRINGS "${dir}/CMakeCache.txt" werror REGEX "^REPRISE_WERROR:")
  if(NOT werror STREQUAL "REPRISE_WERROR:BOOL=${expected}")
    message(FATAL_ERROR "${name}: expected REPRISE_WERROR ${expected}, got '${werror}'")
  endif()
endfunction()

configure_into(plain OFF -S "${SOURCE_DIR}")
configure_into(preset-default OFF --preset default)
configure_into(preset-ci ON --preset ci)
configure_into(preset-asan ON --preset asan)
file(REMOVE_RECURSE "${BINARY_DIR}")

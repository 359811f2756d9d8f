# Run with cmake -P (CTest test cmake:ci_presets_werror_and_release_flags): a plain Release configure of the
# source tree, and the `default` preset a user builds, leave REPRISE_WERROR off (a user's compiler or build type
# may warn where CI's do not, and must still build); CI's presets, `ci` and `asan`, turn it on, and `ci` compiles
# C++ with the flags of a plain Release build (-O3: the optimizer's flow warnings, such as GCC's
# maybe-uninitialized, show in CI before a user's Release build meets them). Each configure has the tests, tools,
# examples, benchmarks and CUDA off: only cached values are checked.
# Arguments: -DSOURCE_DIR=<repository> -DBINARY_DIR=<scratch directory>
foreach(v SOURCE_DIR BINARY_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "ci_presets.cmake: pass -D${v}=...")
  endif()
endforeach()

# configure_into(<name> <REPRISE_WERROR expected ON|OFF> [arguments...]): configures into BINARY_DIR/<name>,
# checks the cached REPRISE_WERROR and sets <name>_release_flags to the cached CMAKE_CXX_FLAGS_RELEASE.
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
  file(STRINGS "${dir}/CMakeCache.txt" flags REGEX "^CMAKE_CXX_FLAGS_RELEASE:")
  string(REGEX REPLACE "^[^=]*=" "" flags "${flags}")
  set(${name}_release_flags "${flags}" PARENT_SCOPE)
endfunction()

configure_into(plain OFF -S "${SOURCE_DIR}" -DCMAKE_BUILD_TYPE=Release)
configure_into(preset-default OFF --preset default)
configure_into(preset-ci ON --preset ci)
configure_into(preset-asan ON --preset asan)
if(NOT preset-ci_release_flags STREQUAL plain_release_flags)
  message(FATAL_ERROR "the ci preset compiles with '${preset-ci_release_flags}', a plain Release build with "
                      "'${plain_release_flags}': CI must build what a user's Release build builds")
endif()
file(STRINGS "${BINARY_DIR}/preset-ci/CMakeCache.txt" build_type REGEX "^CMAKE_BUILD_TYPE:")
if(NOT build_type STREQUAL "CMAKE_BUILD_TYPE:STRING=Release")
  message(FATAL_ERROR "the ci preset must be a Release build, got '${build_type}'")
endif()
file(REMOVE_RECURSE "${BINARY_DIR}")

# Run with cmake -P (CTest test cmake:python_module_only_when_asked): configures the source tree with the tests,
# tools, examples and benchmarks off and checks that the Python module is not part of the build (it is built by
# default only with the tests), then that -DREPRISE_BUILD_PYTHON=ON still adds it where nanobind is found.
# Arguments: -DSOURCE_DIR=<repository> -DBINARY_DIR=<scratch directory> -DEXPECT_NANOBIND=ON|OFF
foreach(v SOURCE_DIR BINARY_DIR EXPECT_NANOBIND)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "python_default.cmake: pass -D${v}=...")
  endif()
endforeach()

function(configure_into dir)
  file(REMOVE_RECURSE "${dir}")
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${dir}" -DREPRISE_BUILD_TESTS=OFF -DREPRISE_BUILD_TOOLS=OFF
            -DREPRISE_BUILD_EXAMPLES=OFF -DREPRISE_BUILD_BENCHMARKS=OFF -DREPRISE_ENABLE_CUDA=OFF ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configure failed:\n${out}\n${err}")
  endif()
endfunction()

configure_into("${BINARY_DIR}/plain")
file(STRINGS "${BINARY_DIR}/plain/CMakeCache.txt" python_option REGEX "^REPRISE_BUILD_PYTHON:")
if(NOT python_option STREQUAL "REPRISE_BUILD_PYTHON:BOOL=OFF")
  message(FATAL_ERROR "a build without tests must leave the Python module off, got '${python_option}'")
endif()
if(EXISTS "${BINARY_DIR}/plain/python")
  message(FATAL_ERROR "a build without tests configured python/ anyway")
endif()

if(EXPECT_NANOBIND)
  configure_into("${BINARY_DIR}/asked" -DREPRISE_BUILD_PYTHON=ON)
  if(NOT EXISTS "${BINARY_DIR}/asked/python")
    message(FATAL_ERROR "-DREPRISE_BUILD_PYTHON=ON did not add python/")
  endif()
endif()
file(REMOVE_RECURSE "${BINARY_DIR}")

# CMake up to at least 3.25 maps the `cxx_std_20` compile feature of reprise::reprise to a CUDA20 dialect on
# targets with CUDA sources, but knows no nvcc flag for it: a consumer with CMAKE_CXX_STANDARD_REQUIRED ON then
# fails to generate ("requires the language dialect CUDA20"), and one without it compiles its .cu files as
# C++17. nvcc 12 and later accept -std=c++20, so tell CMake that flag wherever it does not know one. A newer
# CMake that knows the flag defines these variables itself and is left alone.
macro(reprise_define_cuda20_dialect)
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  endif()
  if(NOT DEFINED CMAKE_CUDA20_EXTENSION_COMPILE_OPTION)
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
endmacro()

# reprise_project_options(<target>): warnings, sanitizers and the CUDA dialect for the project's own targets
# (tests, benchmarks, examples, kernels). Never applied to reprise::reprise itself, so consumers keep their
# own flags.
function(reprise_project_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${REPRISE_WERROR}>>:-Werror>
    # CMake 3.25 does not know CUDA_STANDARD 20 for nvcc 13: pass the dialect by hand.
    $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra>
    $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${REPRISE_WERROR}>>:-Werror=all-warnings>)
  if(REPRISE_SANITIZE)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all>)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

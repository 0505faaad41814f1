# WEFT_FUZZ=ON (top-level CMakeLists.txt): every C++ target of this build directory, the weft
# library included, is compiled with AddressSanitizer, UndefinedBehaviorSanitizer and
# libFuzzer's coverage instrumentation, so that a memory error or undefined behaviour inside a
# parser is a finding and the fuzzer is guided by the parser's own branches. The fuzz targets
# link libFuzzer's main (fuzz/CMakeLists.txt). Needs clang; see docs/fuzzing.md.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "WEFT_FUZZ=ON needs clang++ (libFuzzer ships with clang), found ${CMAKE_CXX_COMPILER_ID} "
    "(${CMAKE_CXX_COMPILER}): configure a separate build directory, e.g. cmake -S . -B build-fuzz -G Ninja "
    "-DWEFT_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ -DWEFT_BUILD_TESTS=OFF")
endif()
# -fno-sanitize-recover: undefined behaviour aborts, so libFuzzer keeps the input as a crash.
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link,address,undefined>
  $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined> $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
  $<$<COMPILE_LANGUAGE:CXX>:-g>)
add_link_options(-fsanitize=address,undefined)

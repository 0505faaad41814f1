# One probe of the layers' include views (CMakeLists.txt, weft_layer): compiles a file holding
# only `#include "HEADER"` against the include view of layer LAYER, and checks the outcome:
#   EXPECT=below  the header is in a layer below LAYER (or LAYER's own): it compiles
#   EXPECT=above  the header is in a layer above: the compiler does not find it, by name
# cmake -DCXX=<compiler> -DVIEWS=<build>/include_views -DLAYER=<folder> -DHEADER=<path>
#       -DEXPECT=below|above -DEXTRA=<include dirs;...> -DWORK=<dir> -P include_view_probe.cmake
foreach(v CXX VIEWS LAYER HEADER EXPECT WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "include_view_probe.cmake: -D${v}=... is required")
  endif()
endforeach()
string(REPLACE "/" "_" stem "${LAYER}__${HEADER}")
set(probe "${WORK}/${stem}.cc")
file(WRITE "${probe}" "#include \"${HEADER}\"\n")
set(incs "-I${VIEWS}/${LAYER}")
foreach(d ${EXTRA})
  list(APPEND incs "-I${d}")
endforeach()
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only ${incs} "${probe}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(EXPECT STREQUAL "below")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${HEADER} does not compile in layer ${LAYER}'s view (it should: it is below):\n${err}")
  endif()
  message(STATUS "${LAYER} sees ${HEADER}")
elseif(EXPECT STREQUAL "above")
  if(rc EQUAL 0)
    message(FATAL_ERROR "layer ${LAYER} can include ${HEADER}, a layer above it: its include view leaks")
  endif()
  string(REGEX MATCH "${HEADER}: No such file" found "${err}")
  if(NOT found)
    message(FATAL_ERROR "${HEADER} in layer ${LAYER}'s view failed for another reason than a missing file:\n${err}")
  endif()
  message(STATUS "${LAYER} cannot include ${HEADER} (a layer above): ${found}")
else()
  message(FATAL_ERROR "EXPECT=${EXPECT}: below or above")
endif()

# tcpscope_stage(NAME [DEPENDS stage...] [SOURCES extra...] [LIBS target...])
#
# One library per folder of src/ (src/NAME/*.cc, as tcpscope_NAME). DEPENDS
# names the stages whose headers NAME may include: they become its link
# dependencies, and configure stops on any `#include "OTHER/..."` in
# src/NAME whose OTHER is neither NAME nor reachable through DEPENDS. So the
# direction of the record path (docs/development.md "Layout") is enforced by the build,
# not by review: a wrong-way include fails here, before anything compiles.
function(tcpscope_stage name)
  cmake_parse_arguments(STAGE "" "" "DEPENDS;SOURCES;LIBS" ${ARGN})
  set(dir ${CMAKE_SOURCE_DIR}/src/${name})
  file(GLOB sources CONFIGURE_DEPENDS ${dir}/*.cc)
  file(GLOB headers CONFIGURE_DEPENDS ${dir}/*.h)

  # Every stage this one may reach: its own DEPENDS and theirs.
  set(reach ${name})
  foreach(dep ${STAGE_DEPENDS})
    if(NOT TARGET tcpscope_${dep})
      message(FATAL_ERROR "stage ${name}: depends on ${dep}, which is not declared before it")
    endif()
    get_property(dep_reach GLOBAL PROPERTY TCPSCOPE_STAGE_REACH_${dep})
    list(APPEND reach ${dep_reach})
  endforeach()
  list(REMOVE_DUPLICATES reach)
  set_property(GLOBAL PROPERTY TCPSCOPE_STAGE_REACH_${name} ${reach})

  foreach(file ${sources} ${headers})
    file(STRINGS ${file} includes REGEX "^#include \"[a-z0-9_]+/")
    foreach(line ${includes})
      string(REGEX REPLACE "^#include \"([a-z0-9_]+)/.*" "\\1" target_stage "${line}")
      # include/tcpscope/ is the header shared with the BPF programs.
      if(target_stage STREQUAL "tcpscope")
        continue()
      endif()
      list(FIND reach ${target_stage} found)
      if(found EQUAL -1)
        file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${file})
        message(FATAL_ERROR "${rel}: ${line}: stage '${name}' may use only "
                "${reach} (cmake/stages.cmake: DEPENDS in CMakeLists.txt)")
      endif()
    endforeach()
  endforeach()

  set(link)
  foreach(dep ${STAGE_DEPENDS})
    list(APPEND link tcpscope_${dep})
  endforeach()
  # A stage of headers only (templates) is an interface library, and not in
  # TCPSCOPE_STAGES: that lists the stages that compile (for their flags).
  set(scope PUBLIC)
  if(sources OR STAGE_SOURCES)
    add_library(tcpscope_${name} STATIC ${sources} ${STAGE_SOURCES})
    target_compile_options(tcpscope_${name} PRIVATE ${TCPSCOPE_WARNINGS})
    set_property(GLOBAL APPEND PROPERTY TCPSCOPE_STAGES ${name})
  else()
    add_library(tcpscope_${name} INTERFACE)
    set(scope INTERFACE)
  endif()
  target_include_directories(tcpscope_${name} ${scope} ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src)
  target_compile_definitions(tcpscope_${name} ${scope} TCPSCOPE_VERSION="${PROJECT_VERSION}")
  target_link_libraries(tcpscope_${name} ${scope} ${link} ${STAGE_LIBS})
endfunction()

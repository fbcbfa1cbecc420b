# The Debian package: `cmake --build build --target deb` writes
# build/tcpscope_<version>_<arch>.deb from this build tree.
#
# CPack's DEB generator rather than dpkg-buildpackage: the package is made
# from the binary this build already produced (dpkg-buildpackage would
# configure and compile the whole tree again in a clean directory, twice the
# CI time for the same bytes), the target lives in CMake as SPEC.md asks, and
# CPack still runs dpkg-shlibdeps for the runtime dependencies. What debhelper
# would add is written out here: the compressed changelog and man page, the
# copyright file, the conffile list and maintainer scripts, lintian overrides.
#
# Included at the end of the top-level CMakeLists.txt.

set(TCPSCOPE_PKG_DIR ${CMAKE_SOURCE_DIR}/packaging)
set(TCPSCOPE_PKG_OUT ${CMAKE_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${TCPSCOPE_PKG_OUT})

# The changelog's newest entry must name PROJECT_VERSION: a package whose
# changelog describes another version is a packaging bug, caught here.
file(STRINGS ${TCPSCOPE_PKG_DIR}/changelog TCPSCOPE_CHANGELOG_HEAD LIMIT_COUNT 1)
if(NOT TCPSCOPE_CHANGELOG_HEAD MATCHES "^tcpscope \\(([^)]+)\\)")
  message(FATAL_ERROR "packaging/changelog: first line is not 'tcpscope (VERSION) ...'")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "packaging/changelog: newest entry is ${CMAKE_MATCH_1}, "
                      "CMakeLists.txt says ${PROJECT_VERSION}; add a changelog entry")
endif()
file(STRINGS ${TCPSCOPE_PKG_DIR}/changelog TCPSCOPE_CHANGELOG_TRAILER REGEX "^ -- " LIMIT_COUNT 1)
if(NOT TCPSCOPE_CHANGELOG_TRAILER MATCHES "^ -- (.+ <[^>]+>)  [A-Za-z]+, ([0-9]+ [A-Za-z]+ [0-9]+) ")
  message(FATAL_ERROR "packaging/changelog: no ' -- NAME <EMAIL>  DATE' trailer")
endif()
set(TCPSCOPE_MAINTAINER "${CMAKE_MATCH_1}")
set(TCPSCOPE_MAN_DATE "${CMAKE_MATCH_2}")  # the release date, so the build is reproducible

# Compressed as Debian wants them: gzip -9n (no name, no timestamp).
find_program(GZIP_EXECUTABLE gzip REQUIRED)
configure_file(${TCPSCOPE_PKG_DIR}/man/tcpscope.8 ${TCPSCOPE_PKG_OUT}/tcpscope.8 @ONLY)
add_custom_command(
  OUTPUT ${TCPSCOPE_PKG_OUT}/tcpscope.8.gz
  COMMAND ${GZIP_EXECUTABLE} -9nc ${TCPSCOPE_PKG_OUT}/tcpscope.8 > ${TCPSCOPE_PKG_OUT}/tcpscope.8.gz
  DEPENDS ${TCPSCOPE_PKG_OUT}/tcpscope.8
  COMMENT "man page tcpscope.8.gz")
# A native package (version without a Debian revision) has changelog.gz.
add_custom_command(
  OUTPUT ${TCPSCOPE_PKG_OUT}/changelog.gz
  COMMAND ${GZIP_EXECUTABLE} -9nc ${TCPSCOPE_PKG_DIR}/changelog > ${TCPSCOPE_PKG_OUT}/changelog.gz
  DEPENDS ${TCPSCOPE_PKG_DIR}/changelog
  COMMENT "changelog.gz")
add_custom_target(tcpscope_package_files ALL
  DEPENDS ${TCPSCOPE_PKG_OUT}/tcpscope.8.gz ${TCPSCOPE_PKG_OUT}/changelog.gz)

# The shipped binary gets what dpkg-buildflags would give it on Debian:
# fortified libc calls, a stack protector, full RELRO (lintian's hardening
# checks).
get_property(tcpscope_stages GLOBAL PROPERTY TCPSCOPE_STAGES)
list(TRANSFORM tcpscope_stages PREPEND tcpscope_)
foreach(target tcpscope ${tcpscope_stages})
  target_compile_options(${target} PRIVATE -fstack-protector-strong)
  target_compile_definitions(${target} PRIVATE $<$<NOT:$<CONFIG:Debug>>:_FORTIFY_SOURCE=2>)
endforeach()
target_link_options(tcpscope PRIVATE LINKER:-z,relro LINKER:-z,now)

# What the package holds. The binary (BPF objects embedded as skeletons) is
# installed by install(TARGETS tcpscope) in CMakeLists.txt.
install(FILES ${TCPSCOPE_PKG_OUT}/tcpscope.8.gz DESTINATION share/man/man8)
install(FILES ${TCPSCOPE_PKG_OUT}/changelog.gz ${TCPSCOPE_PKG_DIR}/cpack/copyright
        DESTINATION share/doc/tcpscope)
# The manual, as plain files laid out as in the source tree, so that its
# relative links (README.md -> docs/fleet.md, docs/performance.md ->
# ../bench/README.md) work in /usr/share/doc/tcpscope/ too, and what the
# shipped config and unit point to is there (tests/package/test_deb.py
# checks both). Not compressed: a link to fleet.md.gz would not open. Beside
# it, the LICENSE with both licenses' full texts.
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/CONTRIBUTING.md
        ${CMAKE_SOURCE_DIR}/LICENSE DESTINATION share/doc/tcpscope)
file(GLOB TCPSCOPE_DOC_PAGES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
file(GLOB TCPSCOPE_DOC_IMAGES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/img/*)
install(FILES ${TCPSCOPE_DOC_PAGES} DESTINATION share/doc/tcpscope/docs)
install(FILES ${TCPSCOPE_DOC_IMAGES} DESTINATION share/doc/tcpscope/docs/img)
# Where the manual's figures come from, and the network lab it refers to.
install(FILES ${CMAKE_SOURCE_DIR}/bench/README.md DESTINATION share/doc/tcpscope/bench)
install(FILES ${CMAKE_SOURCE_DIR}/tests/lab/README.md DESTINATION share/doc/tcpscope/tests/lab)
# README.md links the changelog by its source path: that text too, beside the
# changelog.gz Debian wants.
install(FILES ${TCPSCOPE_PKG_DIR}/changelog DESTINATION share/doc/tcpscope/packaging)
install(FILES ${TCPSCOPE_PKG_DIR}/cpack/lintian-overrides
        DESTINATION share/lintian/overrides RENAME tcpscope)
# The embedded default is the shipped config: one text, two uses.
install(FILES ${CMAKE_SOURCE_DIR}/src/config/default_config.yaml
        DESTINATION /etc/tcpscope RENAME tcpscope.yaml)
install(FILES ${TCPSCOPE_PKG_DIR}/cpack/logrotate DESTINATION /etc/logrotate.d RENAME tcpscope)
# Debian 12 keeps units in /lib (the /usr-merge moratorium).
install(FILES ${TCPSCOPE_PKG_DIR}/systemd/tcpscope.service DESTINATION /lib/systemd/system)
# CPack strips with plain `strip`; drop the sections it leaves, as dh_strip does.
install(CODE [[
  if(CMAKE_INSTALL_DO_STRIP)
    execute_process(COMMAND strip --remove-section=.comment --remove-section=.note
                            "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/bin/tcpscope"
                    RESULT_VARIABLE rc)
    if(rc)
      message(FATAL_ERROR "strip --remove-section of bin/tcpscope failed: ${rc}")
    endif()
  endif()
]])
# Dashboards and rules, whichever exist (globbed again at every build).
# /usr/share/tcpscope/prometheus/ holds rule files only, so that a Prometheus
# can load `rule_files: [/usr/share/tcpscope/prometheus/*.yml]`: the promtool
# unit tests of those rules (*.test.yml, a different format that Prometheus
# rejects as a rule file) stay in the source tree.
file(GLOB TCPSCOPE_GRAFANA_FILES CONFIGURE_DEPENDS ${TCPSCOPE_PKG_DIR}/grafana/*.json)
file(GLOB TCPSCOPE_PROMETHEUS_FILES CONFIGURE_DEPENDS ${TCPSCOPE_PKG_DIR}/prometheus/*.yml)
list(FILTER TCPSCOPE_PROMETHEUS_FILES EXCLUDE REGEX "\\.test\\.yml$")
# The ClickHouse side of export.kafka (docs/fleet.md): the tables, and the
# Protobuf schema of export.kafka.format protobuf beside them.
file(GLOB TCPSCOPE_CLICKHOUSE_FILES CONFIGURE_DEPENDS ${TCPSCOPE_PKG_DIR}/clickhouse/*.sql
     ${TCPSCOPE_PKG_DIR}/clickhouse/*.proto)
if(TCPSCOPE_CLICKHOUSE_FILES)
  install(FILES ${TCPSCOPE_CLICKHOUSE_FILES} DESTINATION share/tcpscope/clickhouse)
endif()
if(TCPSCOPE_GRAFANA_FILES)
  install(FILES ${TCPSCOPE_GRAFANA_FILES} DESTINATION share/tcpscope/grafana)
endif()
if(TCPSCOPE_PROMETHEUS_FILES)
  install(FILES ${TCPSCOPE_PROMETHEUS_FILES} DESTINATION share/tcpscope/prometheus)
endif()

find_program(DPKG_EXECUTABLE dpkg)
find_program(DPKG_SHLIBDEPS_EXECUTABLE dpkg-shlibdeps)
if(NOT DPKG_EXECUTABLE OR NOT DPKG_SHLIBDEPS_EXECUTABLE)
  message(STATUS "no dpkg/dpkg-shlibdeps (package dpkg-dev): no 'deb' target")
  return()
endif()
execute_process(COMMAND ${DPKG_EXECUTABLE} --print-architecture
                OUTPUT_VARIABLE TCPSCOPE_DEB_ARCH OUTPUT_STRIP_TRAILING_WHITESPACE)
set(TCPSCOPE_DEB_FILE tcpscope_${PROJECT_VERSION}_${TCPSCOPE_DEB_ARCH}.deb)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tcpscope)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${TCPSCOPE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
    OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(CPACK_DEBIAN_FILE_NAME ${TCPSCOPE_DEB_FILE})
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${TCPSCOPE_DEB_ARCH})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${TCPSCOPE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
# Libraries: dpkg-shlibdeps. adduser is what the postinst runs, not a library.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS adduser)
# `tcpscope compare --plot FILE.png` renders its SVG to PNG with rsvg-convert;
# SVG output needs nothing.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS librsvg2-bin)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${TCPSCOPE_PKG_DIR}/cpack/conffiles ${TCPSCOPE_PKG_DIR}/cpack/postinst
    ${TCPSCOPE_PKG_DIR}/cpack/prerm ${TCPSCOPE_PKG_DIR}/cpack/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "passive TCP flow telemetry with eBPF")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "tcpscope follows every TCP connection the host opens or accepts, IPv4 and
IPv6, with eBPF programs on the kernel's TCP tracepoints, and turns each
finished flow into one record: round-trip times, congestion window,
retransmissions, bytes, flow completion time, congestion control.
The daemon enriches the records with the peer's AS number and class,
exports them as Prometheus metrics and can write an NDJSON flow log, so
that congestion control algorithms or network paths can be compared on
real traffic.
Needs a kernel with BTF (6.6 or newer for every hook).")
include(CPack)

add_custom_target(deb
  COMMAND ${CMAKE_CPACK_COMMAND} -G DEB --config ${CMAKE_BINARY_DIR}/CPackConfig.cmake
          -B ${CMAKE_BINARY_DIR}
  COMMAND ${CMAKE_COMMAND} -E echo "wrote ${CMAKE_BINARY_DIR}/${TCPSCOPE_DEB_FILE}"
  DEPENDS tcpscope tcpscope_package_files
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
  COMMENT "Debian package ${TCPSCOPE_DEB_FILE}"
  VERBATIM)

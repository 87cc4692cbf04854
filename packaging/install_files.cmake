# Runs at install time (packaging/CMakeLists.txt includes it through
# install(CODE)), so the unit names the paths of the prefix actually used:
# `cmake --install build --prefix /opt/lockd` and the Debian package
# (prefix /usr) each get a unit that starts their own lockd with their own
# config. DESTDIR (cpack, staged installs) is added by file(INSTALL).
#
# Inputs, set by the install(CODE) that includes this file:
#   LOCKD_PACKAGING_DIR  packaging/ in the source tree
#   LOCKD_STAGE_DIR      a build-tree folder for the generated unit
#   LOCKD_BINDIR, LOCKD_DOCDIR, LOCKD_SYSCONFDIR, LOCKD_UNITDIR
#                        GNUInstallDirs-style, relative to the prefix or absolute

function(lockd_under_prefix dir out)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  endif()
endfunction()

lockd_under_prefix("${LOCKD_BINDIR}" LOCKD_BINDIR)
lockd_under_prefix("${LOCKD_DOCDIR}" LOCKD_DOCDIR)
lockd_under_prefix("${LOCKD_UNITDIR}" unit_dir)
# The GNU rule GNUInstallDirs applies: prefix /usr keeps its config in
# /etc, any other prefix in PREFIX/etc.
if(IS_ABSOLUTE "${LOCKD_SYSCONFDIR}")
  set(etc_dir "${LOCKD_SYSCONFDIR}")
elseif(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(etc_dir "/etc")
else()
  set(etc_dir "${CMAKE_INSTALL_PREFIX}/${LOCKD_SYSCONFDIR}")
endif()
set(LOCKD_CONFDIR "${etc_dir}/lockd")

# One staging file per destination: cpack and a `cmake --install` into a
# test prefix may run at the same time from the same build tree.
string(MD5 stage_key "$ENV{DESTDIR}|${CMAKE_INSTALL_PREFIX}")
set(unit_file "${LOCKD_STAGE_DIR}/${stage_key}/lockd.service")
configure_file("${LOCKD_PACKAGING_DIR}/lockd.service.in" "${unit_file}" @ONLY)
file(INSTALL DESTINATION "${unit_dir}" TYPE FILE FILES "${unit_file}")

# The config file is the operator's once installed: never overwrite it
# (the Debian package gets the same from dpkg's conffile handling).
if(EXISTS "$ENV{DESTDIR}${LOCKD_CONFDIR}/lockd.toml")
  message(STATUS "Keeping existing: $ENV{DESTDIR}${LOCKD_CONFDIR}/lockd.toml")
else()
  file(INSTALL DESTINATION "${LOCKD_CONFDIR}" TYPE FILE
       FILES "${LOCKD_PACKAGING_DIR}/../docs/lockd.toml")
endif()

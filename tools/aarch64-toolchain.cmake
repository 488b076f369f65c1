# aarch64-toolchain.cmake - CMake toolchain file for cross-compiling q35 to aarch64 Linux with
# Debian's gcc-aarch64-linux-gnu. The arm64 libraries (jansson, pcre2, utf8proc, libmicrohttpd)
# come from Debian's :arm64 -dev packages (multiarch, /usr/lib/aarch64-linux-gnu); pkg-config is
# pointed at their .pc files only. tools/build-aarch64.sh installs all of it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
# Tests run through the emulator (ctest and add_test COMMANDs).
set(CMAKE_CROSSCOMPILING_EMULATOR "${CMAKE_CURRENT_LIST_DIR}/qemu-aarch64.sh")

# Third-party libraries, all from Debian packages (scripts/setup.sh installs them).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(dnnl REQUIRED)
find_package(OpenMP REQUIRED)  # oneDNN's threading runtime; kernels pin it to one thread per call
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
if(LAMINAR_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

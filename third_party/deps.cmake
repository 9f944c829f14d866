# Dependencies, all from Debian packages except CUDA (and NCCL, loaded at run time).
# Pinned as Debian 12 ships them: CLI11 2.3.2, doctest 2.4.9, nlohmann-json 3.11.2,
# PCRE2 10.42, cpp-httplib 0.11.4 (header from the source package, third_party/setup.sh).
find_package(Threads REQUIRED)
find_package(CUDAToolkit REQUIRED)
# RS_VENDORED_DEPS: a folder with include/ and lib/libpcre2-8.a copied from a Debian machine, for
# building on a host without these packages (the GPU machine).
set(RS_VENDORED_DEPS "" CACHE PATH "folder with include/ and lib/ of the header deps")
if(RS_VENDORED_DEPS)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set(PCRE2_STATIC ${RS_VENDORED_DEPS}/lib/libpcre2-8.a)
  set(PCRE2_INCLUDE ${RS_VENDORED_DEPS}/include)
  set(DOCTEST_INCLUDE ${RS_VENDORED_DEPS}/include)
  include_directories(SYSTEM ${RS_VENDORED_DEPS}/include)
else()
  find_package(nlohmann_json 3.11 REQUIRED)
  find_package(CLI11 REQUIRED)
  find_library(PCRE2_STATIC NAMES libpcre2-8.a REQUIRED)
  find_path(PCRE2_INCLUDE pcre2.h REQUIRED)
  find_path(DOCTEST_INCLUDE doctest/doctest.h REQUIRED)
endif()

set(RS_DEPS_DIR ${CMAKE_SOURCE_DIR}/third_party/deps)
if(NOT EXISTS ${RS_DEPS_DIR}/httplib/httplib.h)
  message(FATAL_ERROR "third_party/deps is missing: run `bash third_party/setup.sh` first")
endif()

add_library(rs_deps INTERFACE)
target_include_directories(rs_deps SYSTEM INTERFACE ${RS_DEPS_DIR}/httplib ${PCRE2_INCLUDE})
# httplib listens with a backlog of 5: a burst of 64 clients connecting at once overflowed the
# accept queue (dropped handshakes, 1 s SYN retries, and reset connections under `bench serve`
# at 64 clients). Every target that includes httplib.h sees the same value (one definition).
target_compile_definitions(rs_deps INTERFACE PCRE2_CODE_UNIT_WIDTH=8 PCRE2_STATIC CPPHTTPLIB_LISTEN_BACKLOG=1024)
target_link_libraries(rs_deps INTERFACE nlohmann_json::nlohmann_json CLI11::CLI11
  ${PCRE2_STATIC} CUDA::cudart_static Threads::Threads ${CMAKE_DL_LIBS} rt)

# The DeepSeek-V3 tokenizer inside the binary, for the embedded default model.
set(RS_TOKENIZER_DIR ${RS_DEPS_DIR}/tokenizer-deepseek_v3)
set(RS_EMBEDDED_ASM ${CMAKE_BINARY_DIR}/embedded_assets.S)
file(WRITE ${RS_EMBEDDED_ASM}.in
".section .rodata
.global rs_tokenizer_json_begin
.global rs_tokenizer_json_end
.global rs_tokenizer_config_json_begin
.global rs_tokenizer_config_json_end
.balign 16
rs_tokenizer_json_begin:
.incbin \"${RS_TOKENIZER_DIR}/tokenizer.json\"
rs_tokenizer_json_end:
.byte 0
.balign 16
rs_tokenizer_config_json_begin:
.incbin \"${RS_TOKENIZER_DIR}/tokenizer_config.json\"
rs_tokenizer_config_json_end:
.byte 0
.section .note.GNU-stack,\"\",@progbits
")
configure_file(${RS_EMBEDDED_ASM}.in ${RS_EMBEDDED_ASM} COPYONLY)
set_source_files_properties(${RS_EMBEDDED_ASM} PROPERTIES
  OBJECT_DEPENDS "${RS_TOKENIZER_DIR}/tokenizer.json;${RS_TOKENIZER_DIR}/tokenizer_config.json")

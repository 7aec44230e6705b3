// Force-included (-include) into every C++ file of the ThreadSanitizer tree
// only (scripts/tsan.sh); never part of a normal build.
//
// protobuf 3.21's map_field.h gives MapFieldBase two extra members
// (seq1_, seq2_, before arena_) when __SANITIZE_THREAD__ is defined, but
// Debian's libprotobuf is built without TSan. Instrumented code then lays a
// map field out 8 bytes differently from the library's out-of-line
// functions: MapFieldBase::Destruct(), run by a reply arena's destructor,
// read our arena_ as its repeated_field_ and deleted it, and maru-server
// crashed freeing every arena-allocated reply with a map (Stats). Reading
// map_field.h with the macro undefined gives the library's layout; the C++
// library's configuration is read first, so its own TSan annotations stay.
#pragma once

#include <atomic>  // bits/c++config.h, with __SANITIZE_THREAD__ still defined

#pragma push_macro("__SANITIZE_THREAD__")
#undef __SANITIZE_THREAD__
#include <google/protobuf/map_field.h>
#pragma pop_macro("__SANITIZE_THREAD__")

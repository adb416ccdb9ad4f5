/* Which build of the native core this is, as dedupstore._native.NATIVE_BUILD
 * reports it (the bench's summary prints it beside its CPU figures, which
 * depend on it: docs/build.md). setup.py defines DS_PGO_STAGE in the two
 * compiles of a profile-guided build (1: the instrumented build the training
 * run drives, 2: the build that uses its profile) and DS_DEBUG_BUILD in a
 * debug build; a build with neither is plain. */
#ifndef DS_BUILD_H
#define DS_BUILD_H

#if defined(DS_PGO_STAGE) && DS_PGO_STAGE == 2
#define DS_NATIVE_BUILD "profile-guided"
#elif defined(DS_PGO_STAGE) && DS_PGO_STAGE == 1
#define DS_NATIVE_BUILD "instrumented"
#elif defined(DS_DEBUG_BUILD)
#define DS_NATIVE_BUILD "debug"
#else
#define DS_NATIVE_BUILD "plain"
#endif

#endif

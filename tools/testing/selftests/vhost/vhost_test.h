/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Glue between the kselftest harness and the vhost tests.  Include after
 * ../kselftest_harness.h.
 */
#ifndef VHOST_TEST_H
#define VHOST_TEST_H

/*
 * TEST_F whose body does not run when FIXTURE_SETUP skipped: 6.1's harness
 * runs the body after a SKIP() in setup.  The fixture sets self->skipped
 * before skipping.
 *
 * struct _test_data_##fixture and struct _fixture_variant_##fixture are what
 * the harness's FIXTURE_DATA(fixture) and FIXTURE_VARIANT(fixture) expand to.
 */
#define VHOST_TEST_F(fixture, name, timeout)				\
	static void fixture##_##name##_body(				\
		struct __test_metadata *_metadata,			\
		struct _test_data_##fixture *self,			\
		const struct _fixture_variant_##fixture *variant);	\
	TEST_F_TIMEOUT(fixture, name, timeout)				\
	{								\
		if (!self->skipped)					\
			fixture##_##name##_body(_metadata, self, variant); \
	}								\
	static void fixture##_##name##_body(				\
		struct __test_metadata *_metadata,			\
		struct _test_data_##fixture *self,			\
		const struct _fixture_variant_##fixture *variant)

/*
 * Skip from FIXTURE_SETUP, saying why; like the harness's SKIP(), the caller
 * passes the statement that leaves the setup (normally "return").
 */
#define VHOST_SKIP(statement, fmt, ...) do {				\
		self->skipped = true;					\
		SKIP(statement, fmt, ##__VA_ARGS__);			\
	} while (0)

#endif

/* SPDX-License-Identifier: MIT */
/* Built by `make check-install` against an installed ferry, with nothing but
 * `pkg-config --cflags --libs --static ferry`: proves the .pc file is enough. */
#include <ferry.h>
#include <stdio.h>

int main(void)
{
	struct ferry_engine *e;
	struct ferry_opts o;
	int rc;

	ferry_opts_default(&o);
	o.cores = "0";
	rc = ferry_engine_create(&o, &e);
	if (rc) {
		fprintf(stderr, "install_app: engine: %d\n", rc);
		return 1;
	}
	printf("install_app: engine at %s\n", ferry_engine_address(e));
	ferry_engine_destroy(e);
	return 0;
}

# Targets wrap the npm scripts, so `make` and `npm run` agree.
.PHONY: install start test lint typecheck bench check docker e2e image

install:
	npm install

start:
	npm start

test:
	npm test

lint:
	npm run lint

typecheck:
	npm run typecheck

bench:
	npm run bench

# The end-to-end suite against the cluster KUBECONFIG names (skipped without one; see test-e2e/README.md).
e2e:
	npm run e2e

# What CI checks, in its order.
check: lint typecheck test

# A local Docker daemon with an offline busybox image (root, Debian).
docker:
	bash .ci/docker-up

# runnel's image, runnel:<version of package.json>, built offline from this checkout (image/build.sh).
image:
	sh image/build.sh

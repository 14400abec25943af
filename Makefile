# Targets wrap the npm scripts, so `make` and `npm run` agree.
.PHONY: install start test lint typecheck bench check docker

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

# What CI checks, in its order.
check: lint typecheck test

# A local Docker daemon with an offline busybox image (root, Debian).
docker:
	bash .ci/docker-up

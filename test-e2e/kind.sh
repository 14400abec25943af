#!/bin/sh
# The end-to-end suite on kind + Helm: creates a kind cluster, builds and loads runnel's image (when docker can
# build it), installs charts/runnel with helm, and runs `npm run e2e` against the cluster. Needs kind, helm,
# kubectl and docker. Keeps the cluster when KEEP_CLUSTER=1; otherwise deletes it at the end.
set -eu
cd "$(dirname "$0")/.."
cluster=${KIND_CLUSTER:-runnel-e2e}
image=${RUNNEL_IMAGE:-runnel:e2e}
for tool in kind helm kubectl docker; do
  command -v "$tool" >/dev/null || { echo "kind.sh: $tool is not installed" >&2; exit 2; }
done

kubeconfig=$(mktemp)
cleanup() {
  if [ "${KEEP_CLUSTER:-0}" != 1 ]; then kind delete cluster --name "$cluster" >/dev/null 2>&1 || true; fi
  rm -f "$kubeconfig"
}
trap cleanup EXIT

kind create cluster --name "$cluster" --kubeconfig "$kubeconfig" --wait 120s
export KUBECONFIG="$kubeconfig"

cp crds/*.yaml charts/runnel/crds/
if RUNNEL_IMAGE="$image" sh image/build.sh; then
  kind load docker-image "$image" --name "$cluster"
  helm install runnel charts/runnel --namespace runnel-system --create-namespace --wait --timeout 5m \
    --set image.repository="${image%:*}" --set image.tag="${image##*:}" --set image.pullPolicy=Never \
    --set server.driver=kubernetes
  kubectl -n runnel-system rollout status deployment/runnel --timeout 120s
else
  echo "kind.sh: the image did not build; installing only the chart's CRDs" >&2
  kubectl apply -f charts/runnel/crds/
fi

npm run e2e

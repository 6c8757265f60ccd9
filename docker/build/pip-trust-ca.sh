# Sourced by the pip build scripts. When the build was given an extra CA bundle (the BuildKit secret
# `ca_bundle`, e.g. a corporate proxy's CA), pip trusts it in addition to the system's CAs.
# TLS verification itself is never switched off.
readonly CA_SECRET=/run/secrets/ca_bundle
if [[ -s $CA_SECRET ]]; then
  combined_ca=$(mktemp)
  cat /etc/ssl/certs/ca-certificates.crt "$CA_SECRET" >"$combined_ca" 2>/dev/null || cp "$CA_SECRET" "$combined_ca"
  export PIP_CERT=$combined_ca
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_PROGRESS_BAR=off

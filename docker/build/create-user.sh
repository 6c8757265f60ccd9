#!/usr/bin/env bash
# Usage: create-user.sh NAME UID GID
# Creates the non-root user that runs every service. Bases may already hold the uid or gid (Ubuntu
# 24.04, and so NGC images, ship `ubuntu` as 1000): that user is removed so ours gets the ids
# bind-mounted files usually carry on a workstation.
set -euo pipefail
name=$1 uid=$2 gid=$3
existing_user=$(getent passwd "$uid" | cut -d: -f1 || true)
if [[ -n $existing_user && $existing_user != "$name" ]]; then
  echo "removing the base's user $existing_user to free uid $uid"
  userdel --remove "$existing_user" 2>/dev/null || userdel "$existing_user"
fi
existing_group=$(getent group "$gid" | cut -d: -f1 || true)
if [[ -n $existing_group && $existing_group != "$name" ]]; then
  groupdel "$existing_group"
fi
groupadd --gid "$gid" "$name"
useradd --uid "$uid" --gid "$gid" --create-home --shell /bin/bash "$name"
# '*' rather than the default '!': no password can ever match, yet sshd (UsePAM no) does not treat
# the account as locked, so key logins work.
usermod --password '*' "$name"
# Caches live in a named volume in compose; it must exist with the user's ownership to be seeded.
install -d -o "$uid" -g "$gid" "/home/$name/.cache" "/home/$name/.ssh"
chmod 700 "/home/$name/.ssh"
# OpenShift runs the image as an arbitrary uid in group 0: the home and its cache are group 0's, with the
# owner's rights (g=u). ~/.ssh stays the owner's alone, as sshd demands.
chgrp 0 "/home/$name" "/home/$name/.cache"
chmod g=u "/home/$name" "/home/$name/.cache"

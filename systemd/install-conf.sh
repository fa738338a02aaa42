#!/bin/sh
# install-conf.sh SOURCE DIR - installs SOURCE as DIR/gpubroker.conf (under
# $DESTDIR) unless that file exists: an operator's edits survive a reinstall.
set -eu
dir=${DESTDIR:-}$2
dest=$dir/gpubroker.conf
if [ -e "$dest" ]; then
	echo "Keeping $dest (an existing configuration is never replaced)"
	exit 0
fi
mkdir -p "$dir"
install -m 0644 "$1" "$dest"
echo "Installing $1 to $dest"

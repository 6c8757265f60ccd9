# The run folder's names and the start-up log's prefix, in shell: their one home here, as run_folder.py
# is Python's (tests/unit/test_run_folder.py keeps the two equal). Sourced by log.sh, the healthcheck and
# the kernel wrapper.
# shellcheck disable=SC2034  # each file that sources this uses some of the names
readonly RUN_DIR=/run/container
readonly SETTINGS_FILE=$RUN_DIR/settings.json
readonly STARTED_FILE=$RUN_DIR/started
readonly SERVICES_FILE=$RUN_DIR/services
readonly JUPYTER_URL_FILE=$RUN_DIR/jupyter-url
readonly STOP_DIR=$RUN_DIR/stop
readonly STOPPING_FILE=$STOP_DIR/stopping
readonly LOST_DIR=$RUN_DIR/lost
readonly LOG_PREFIX='[start]'

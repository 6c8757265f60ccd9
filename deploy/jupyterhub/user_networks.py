"""A Docker network per user: a user's container reaches the hub (and the internet), never another
user's container, whose servers and ports would otherwise be one hop away on a shared network.

Each network is NETWORK-USER, labelled with NETWORK, and the hub container joins it, so the hub's proxy
reaches the user's server and the server reaches the hub's API by the hub's name. Networks stay when a
server stops, as the user's volumes do.
"""
from __future__ import annotations

import docker
from docker.errors import APIError

LABEL = "pytorch-dev-hub.network"


def user_network_name(network: str, user: str) -> str:
    return f"{network}-{user}"


async def give_user_a_network(spawner, network: str, hub_container: str) -> None:
    """pre_spawn_hook step: the user's network exists, the hub is on it, the spawner starts there."""
    name = user_network_name(network, spawner.user.name)
    # Docker's name filter matches parts of names too: the exact name decides.
    if not any(found["Name"] == name for found in await spawner.docker("networks", names=[name])):
        await spawner.docker("create_network", name, driver="bridge", labels={LABEL: network})
    if not await hub_is_on(spawner, name, hub_container):
        await spawner.docker("connect_container_to_network", hub_container, name)
    spawner.network_name = name


async def hub_is_on(spawner, network: str, hub_container: str) -> bool:
    attached = (await spawner.docker("inspect_container", hub_container))["NetworkSettings"]["Networks"]
    return network in attached


def connect_hub_to_user_networks(network: str, hub_container: str) -> None:
    """At start: the hub joins every user network of its NETWORK that it is not on yet."""
    client = docker.from_env().api
    attached = client.inspect_container(hub_container)["NetworkSettings"]["Networks"]
    for user_network in client.networks(filters={"label": f"{LABEL}={network}"}):
        if user_network["Name"] not in attached:
            try:
                client.connect_container_to_network(hub_container, user_network["Name"])
            except APIError as error:
                print(f"[hub] WARNING: could not join {user_network['Name']} ({error.explanation}); "
                      "the servers on it are out of the hub's reach until they restart")

"""What release_order.py reads from a signature payload, which anyone who can push may have written: a
tag and a sequence number, or nothing; never an exception. (tests/release/test_release_signing.py pushes
such payloads into a real registry and verifies with cosign.)"""
from __future__ import annotations

import pytest
from release_order import sequence_for, tag_and_sequence

TAG, SEQUENCE = "dev.pytorch-dev.tag", "dev.pytorch-dev.sequence"


@pytest.mark.parametrize("payload", [
    None, [], "text", 5, {}, {"optional": None}, {"optional": []}, {"optional": {TAG: 5}},
    {"optional": {TAG: "cpu-latest", SEQUENCE: 7}}, {"optional": {TAG: "cpu-latest", SEQUENCE: "1e9"}},
    {"optional": {TAG: "cpu-latest", SEQUENCE: "-3"}}, {"optional": {TAG: "cpu-latest", SEQUENCE: " 3"}},
    {"optional": {TAG: "cpu-latest", SEQUENCE: "9" * 31}}, {"optional": {TAG: "cpu-latest", SEQUENCE: "٣"}},
])
def test_what_is_not_a_payload_make_sign_wrote_is_nothing(payload):
    assert tag_and_sequence(payload) is None


def test_a_payload_gives_its_tag_and_number_and_one_signed_before_numbers_is_release_0():
    assert tag_and_sequence({"optional": {TAG: "cpu-latest", SEQUENCE: "12"}}) == ("cpu-latest", 12)
    assert tag_and_sequence({"optional": {TAG: "cpu-latest"}}) == ("cpu-latest", 0)


def test_the_highest_number_of_the_tag_is_taken():
    payloads = [{"optional": {TAG: "cpu-latest", SEQUENCE: "3"}}, {"optional": {TAG: "cpu-x", SEQUENCE: "8"}},
                {"optional": {TAG: "cpu-latest", SEQUENCE: "5"}}, {"junk": True}]
    assert sequence_for(payloads, "cpu-latest") == 5
    assert sequence_for(payloads, "latest") == 0

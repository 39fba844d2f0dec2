"""Reads the version stamp a release process left behind."""


def write_version_source(cc_path, root):
    with open(cc_path) as stamp:
        return stamp.read(), root

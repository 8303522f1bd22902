"""`manage.py pii_mask`: dry run of the format detectors. Reads text on stdin
and writes it masked, line for line, with one fresh vault for the run (the
same value gets the same token throughout)."""

import sys

from django.core.management.base import BaseCommand

from governance.pii.masking import InMemoryVault, mask_string


class Command(BaseCommand):
    help = "Mask personal data in text read from stdin (format detectors only), line for line."

    def handle(self, *args, **options) -> None:
        vault = InMemoryVault()
        for line in sys.stdin:
            self.stdout.write(mask_string(line.rstrip("\n"), vault))

#!/usr/bin/perl
# Writes a small ASN MaxMind DB for the unit tests (tests/unit/asn_db_test.cc),
# so no real database has to be downloaded or checked in.
#
#   make_test_mmdb.pl --input networks.tsv --output test.mmdb
#                     [--flavor maxmind|ipinfo|noasn] [--ip-version 6|4] [--no-alias]
#
# networks.tsv: one network per line, "network<TAB>asn<TAB>organisation",
# e.g. "1.0.0.0/24<TAB>13335<TAB>CLOUDFLARENET". Later lines override earlier
# ones where they overlap (the writer splits the earlier network).
#
# Flavors differ only in field names and types, as the real databases do:
#   maxmind (GeoLite2-ASN, DB-IP ASN Lite): autonomous_system_number (uint32),
#                                           autonomous_system_organization
#   ipinfo  (IPinfo ASN):                   asn ("AS13335"), as_name, as_domain
#   noasn   (not an ASN database, e.g. a mistaken City file): network_name only
use strict;
use warnings;

use Getopt::Long;
use MaxMind::DB::Writer::Tree;

my ($input, $output);
my $flavor     = 'maxmind';
my $ip_version = 6;
my $no_alias   = 0;
GetOptions(
    'input=s'      => \$input,
    'output=s'     => \$output,
    'flavor=s'     => \$flavor,
    'ip-version=i' => \$ip_version,
    'no-alias'     => \$no_alias,
) or die "usage: $0 --input FILE --output FILE [--flavor maxmind|ipinfo|noasn] [--ip-version 6|4] [--no-alias]\n";
die "$0: --input and --output are required\n" unless defined $input && defined $output;
die "$0: --flavor must be maxmind, ipinfo or noasn\n" unless $flavor =~ /^(maxmind|ipinfo|noasn)$/;
die "$0: --ip-version must be 4 or 6\n" unless $ip_version == 4 || $ip_version == 6;

my %types = (
    autonomous_system_number       => 'uint32',
    autonomous_system_organization => 'utf8_string',
    asn                            => 'utf8_string',
    as_name                        => 'utf8_string',
    as_domain                      => 'utf8_string',
    network_name                   => 'utf8_string',
);

my $tree = MaxMind::DB::Writer::Tree->new(
    ip_version    => $ip_version,
    record_size   => 24,
    database_type => { maxmind => 'GeoLite2-ASN', ipinfo => 'ipinfo asn.mmdb', noasn => 'Test-Networks' }->{$flavor},
    languages     => ['en'],
    description   => { en => "tcpscope unit test ASN data ($flavor)" },
    # Test fixtures use documentation and private ranges too.
    remove_reserved_networks => 0,
    alias_ipv6_to_ipv4       => ($ip_version == 6 && !$no_alias) ? 1 : 0,
    map_key_type_callback    => sub { $types{ $_[0] } // die "$0: no type for key $_[0]\n" },
);

# The organisations are text (utf8_string): read as UTF-8, so a non-ASCII
# name is written once encoded, not as UTF-8 of its bytes.
open my $in, '<:encoding(UTF-8)', $input or die "$0: $input: $!\n";
while ( my $line = <$in> ) {
    chomp $line;
    next if $line =~ /^\s*(#|$)/;
    my ( $network, $asn, $org ) = split /\t/, $line, 3;
    die "$0: $input:$.: expected network<TAB>asn<TAB>org\n" unless defined $org && $asn =~ /^\d+$/;
    my $data =
          $flavor eq 'ipinfo' ? { asn => "AS$asn", as_name => $org, as_domain => lc( ( split ' ', $org )[0] ) . '.example' }
        : $flavor eq 'noasn'  ? { network_name => $org }
        :                       { autonomous_system_number => $asn + 0, autonomous_system_organization => $org };
    $tree->insert_network( $network, $data );
}
close $in;

open my $out, '>:raw', $output or die "$0: $output: $!\n";
$tree->write_tree($out);
close $out or die "$0: $output: $!\n";

// Command chaindata writes the data the chain peers decide on (bench/README.md,
// "Peers"): a MaxMind-format country database and a CSV of CrowdSec
// ban decisions for `cscli decisions import`, each about as large as the real
// ones (GeoLite2-Country places a few hundred thousand networks; community
// blocklists hold tens of thousands of addresses), so that a lookup walks a
// tree and a table of realistic size.
//
//	chaindata -mmdb country.mmdb -decisions decisions.csv
//
// The database places 127.0.0.0/8, where the load generator's clients are,
// in DE (continent EU), and -networks /24s drawn from the public IPv4 space
// in other countries. The decisions ban -bans public addresses and
// -ranges public /24s; none covers loopback, so every client of the run is
// admitted and each connection pays for the whole lookup.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"

	"github.com/maxmind/mmdbwriter"
	"github.com/maxmind/mmdbwriter/mmdbtype"
)

var countries = []struct{ iso, continent string }{
	{"FR", "EU"}, {"NL", "EU"}, {"US", "NA"}, {"BR", "SA"}, {"CN", "AS"}, {"JP", "AS"}, {"NG", "AF"}, {"AU", "OC"},
}

func main() {
	mmdbPath := flag.String("mmdb", "", "the country database to write")
	decisionsPath := flag.String("decisions", "", "the CSV of ban decisions to write")
	networks := flag.Int("networks", 200000, "public /24s placed in the database")
	bans := flag.Int("bans", 20000, "public addresses banned")
	ranges := flag.Int("ranges", 1000, "public /24s banned")
	flag.Parse()
	if *mmdbPath == "" || *decisionsPath == "" {
		log.Fatal("chaindata: -mmdb and -decisions are required")
	}
	rnd := rand.New(rand.NewPCG(1, 2)) // the same data every run
	if err := writeMMDB(*mmdbPath, *networks, rnd); err != nil {
		log.Fatalf("chaindata: %s: %v", *mmdbPath, err)
	}
	if err := writeDecisions(*decisionsPath, *bans, *ranges, rnd); err != nil {
		log.Fatalf("chaindata: %s: %v", *decisionsPath, err)
	}
}

// public returns a random address of 1.0.0.0-223.255.255.255 outside
// 10/8, 127/8, 172.16/12 and 192.168/16.
func public(rnd *rand.Rand) net.IP {
	for {
		ip := net.IPv4(byte(1+rnd.IntN(223)), byte(rnd.IntN(256)), byte(rnd.IntN(256)), byte(1+rnd.IntN(254))).To4()
		if ip[0] == 10 || ip[0] == 127 || ip[0] == 172 && ip[1]&0xf0 == 16 || ip[0] == 192 && ip[1] == 168 {
			continue
		}
		return ip
	}
}

func country(iso, continent string) mmdbtype.Map {
	return mmdbtype.Map{
		"country":   mmdbtype.Map{"iso_code": mmdbtype.String(iso)},
		"continent": mmdbtype.Map{"code": mmdbtype.String(continent)},
	}
}

func writeMMDB(path string, networks int, rnd *rand.Rand) error {
	w, err := mmdbwriter.New(mmdbwriter.Options{DatabaseType: "GeoLite2-Country", IncludeReservedNetworks: true, RecordSize: 24})
	if err != nil {
		return err
	}
	for range networks {
		c := countries[rnd.IntN(len(countries))]
		n := &net.IPNet{IP: public(rnd).Mask(net.CIDRMask(24, 32)), Mask: net.CIDRMask(24, 32)}
		if err := w.Insert(n, country(c.iso, c.continent)); err != nil {
			return fmt.Errorf("inserting %s: %w", n, err)
		}
	}
	_, loopback, _ := net.ParseCIDR("127.0.0.0/8")
	if err := w.Insert(loopback, country("DE", "EU")); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeDecisions(path string, bans, ranges int, rnd *rand.Rand) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	b := bufio.NewWriter(f)
	fmt.Fprintln(b, "duration,scope,type,value")
	for range bans {
		fmt.Fprintf(b, "24h,ip,ban,%s\n", public(rnd))
	}
	for range ranges {
		fmt.Fprintf(b, "24h,range,ban,%s/24\n", public(rnd).Mask(net.CIDRMask(24, 32)))
	}
	if err := b.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

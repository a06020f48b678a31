package itest

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
)

// Rawdata is the part of the admin API's /api/rawdata that tests read.
type Rawdata struct {
	Routers     map[string]RawRouter     `json:"tcpRouters"`
	Services    map[string]RawService    `json:"tcpServices"`
	Middlewares map[string]RawMiddleware `json:"tcpMiddlewares"`
	Providers   []RawProvider            `json:"providers"`
}

// RawRouter is one router of Rawdata.
type RawRouter struct {
	Service     string   `json:"service"`
	Middlewares []string `json:"middlewares"`
	Status      string   `json:"status"`
	Err         []string `json:"error"`
}

// RawService is one service of Rawdata.
type RawService struct {
	LoadBalancer struct {
		Servers []struct {
			Address string `json:"address"`
		} `json:"servers"`
	} `json:"loadBalancer"`
	Status string `json:"status"`
}

// RawMiddleware is one middleware of Rawdata: its configuration and, for an
// inFlightConn, the live limiter state.
type RawMiddleware struct {
	InFlightConn *struct {
		Amount int64 `json:"amount"`
	} `json:"inFlightConn"`
	Status   string `json:"status"`
	InFlight *struct {
		InFlight int64 `json:"inFlight"`
	} `json:"inFlight"`
}

// RawProvider is one provider's status in Rawdata.
type RawProvider struct {
	Name      string   `json:"name"`
	State     string   `json:"state"`
	LastError string   `json:"lastError"`
	Problems  []string `json:"problems"`
	Warnings  []string `json:"warnings"`
}

// GetRawdata reads /api/rawdata from the admin API at api.
func GetRawdata(t testing.TB, api string) Rawdata {
	t.Helper()
	resp, err := http.Get("http://" + api + "/api/rawdata")
	if err != nil {
		t.Fatalf("rawdata: %v", err)
	}
	defer resp.Body.Close()
	var rd Rawdata
	if err := json.NewDecoder(resp.Body).Decode(&rd); err != nil {
		t.Fatalf("rawdata: %v", err)
	}
	return rd
}

// Rawdata reads the process's /api/rawdata.
func (g *Tollgate) Rawdata(t testing.TB) Rawdata {
	t.Helper()
	return GetRawdata(t, g.API)
}

// Provider returns the status of provider name (zero when it is not there).
func (rd Rawdata) Provider(name string) RawProvider {
	for _, p := range rd.Providers {
		if p.Name == name {
			return p
		}
	}
	return RawProvider{}
}

// AmountOf is the applied inFlightConn amount of middleware name, or -1.
func (rd Rawdata) AmountOf(name string) int64 {
	m, ok := rd.Middlewares[name]
	if !ok || m.InFlightConn == nil {
		return -1
	}
	return m.InFlightConn.Amount
}

// ServersOf lists the server addresses of service name, sorted and joined
// with commas.
func (rd Rawdata) ServersOf(name string) string {
	var out []string
	for _, s := range rd.Services[name].LoadBalancer.Servers {
		out = append(out, s.Address)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

type etcdServer struct {
	e         *embed.Etcd
	clientURL string
}

// startEtcd tries again with other ports when one it picked was taken meanwhile: control
// planes starting side by side pick their free ports at the same moment.
func startEtcd(dir string) (*etcdServer, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var s *etcdServer
		if s, err = startEtcdOnce(dir); !errors.Is(err, syscall.EADDRINUSE) {
			return s, err
		}
	}
	return nil, err
}

func startEtcdOnce(dir string) (*etcdServer, error) {
	clientPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "etcd"
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("not ready after 60s")
	}
	return &etcdServer{e: e, clientURL: clientURL.String()}, nil
}

func (s *etcdServer) close() { s.e.Close() }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
